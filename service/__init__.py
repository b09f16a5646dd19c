"""convsel's HTTP service: a thin FastAPI shell over the convsel library.

``service.app.create_app()`` builds the application; ``convsel serve`` runs it under uvicorn.
Importing this package imports nothing heavy: the CLI reads :mod:`service.config` without
loading FastAPI.
"""
