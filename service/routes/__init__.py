"""One module per route family; each exposes ``router``. service.app.ROUTERS lists them."""
