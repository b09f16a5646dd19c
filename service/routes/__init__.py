"""One module per route family, each with its ``router``; ``service.app`` mounts them.
A route module never imports another: code two of them share has a module of its own."""
