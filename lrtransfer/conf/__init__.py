"""The YAML configs. Composing from them needs every option's typed options in Hydra's
ConfigStore, so importing this package (as Hydra does to read it) registers them."""

from lrtransfer.config import register

register()
