"""One module per Kafka API, named by key (``k56_alter_partition.py``); importing this package registers them."""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    if _module.name.startswith("k"):
        importlib.import_module(f"{__name__}.{_module.name}")
