"""Integrations with web frameworks, each an optional extra: ``tenure.contrib.fastapi``
(``pip install 'tenure[fastapi]'``). Importing ``tenure`` imports none of them."""
