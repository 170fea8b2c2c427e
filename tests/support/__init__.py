"""Importable test support: builders, hypothesis strategies, harnesses (on sys.path through pytest's `pythonpath`,
and for bench/ through the .pth file `make setup` writes into the venv)."""
