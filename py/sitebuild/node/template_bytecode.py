"""Compile the Jinja templates that ``import panel`` compiles, with the browser's Python 3.13 (run inside Pyodide
under Node by sitebuild.packages.template_bytecode).

Installs the site's wheels (/host/wheels/*.whl), does prelude.py's imports, and copies to /host/tree the bytecode
cache files that Panel's and Bokeh's Jinja environments (patched to keep one in their template folders) wrote.
Unpacking a wheel loads none of its extension modules: Python loads one when it is imported.
"""

import pathlib
import shutil
import sysconfig
import zipfile

site = pathlib.Path(sysconfig.get_path("purelib"))
for wheel in sorted(pathlib.Path("/host/wheels").glob("*.whl")):
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)

import panel  # noqa: E402, F401 - what prelude.py imports
import panel.io.pyodide  # noqa: E402, F401

for cached in site.glob("*/**/__jinja2_*.cache"):
    target = pathlib.Path("/host/tree", cached.relative_to(site))
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cached, target)
