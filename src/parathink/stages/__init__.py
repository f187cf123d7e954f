"""One function per curriculum stage, and the runner that chains them."""
