"""Integrations with web frameworks, each an optional extra: ``tenure.contrib.fastapi``
(``pip install 'tenure[fastapi]'``) and ``tenure.contrib.django`` (``tenure[django]``).
Importing ``tenure`` imports none of them."""
