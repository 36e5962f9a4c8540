"""No models: tenure's tables are its own, made by its migrations. The module
exists because Django sends ``post_migrate`` only to apps with one, and
tenure migrates its tables then (see ``apps.migrate_tenure``)."""
