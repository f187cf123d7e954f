"""Build hook: the wheel carries the checkout's ``hydra_conf/`` as ``parathink/hydra_conf``.

Users edit the configs in ``hydra_conf/`` at the top of the checkout (one place); an installed wheel (the trainer
image, a KFP component, ``pip install parathink-*.whl``) has no checkout, so the build copies that folder into the
package and ``parathink.pipeline.compose.config_dir`` finds it there. An editable install reads the checkout directly.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildPyWithConfigs(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "parathink" / "hydra_conf"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(HERE / "hydra_conf", target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildPyWithConfigs})
