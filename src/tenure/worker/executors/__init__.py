"""Executors run handlers for the supervisor: threads, or executor processes.

Both sides of the process pool (``process.py`` in the supervisor,
``child_main.py`` in each executor process) speak the frames of ``wire.py``.
"""
