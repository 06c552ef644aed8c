"""One module per Kafka API, named by key (``k56_alter_partition.py``); importing this package registers them."""

import importlib
import pkgutil

from epochkraft.protocol.api import ApiSpec, registered


def served(listener: str) -> dict[int, ApiSpec]:
    """The APIs a listener serves, by key."""
    return registered(listener)


for _module in pkgutil.iter_modules(__path__):
    if _module.name.startswith("k"):
        importlib.import_module(f"{__name__}.{_module.name}")
