"""The static site's builder, run by ``build.py`` (CPython on the build machine; nothing here is shipped).

One module, one job:

- ``common``: paths, the error the user sees, logging, subprocesses, hashes;
- ``lock``: ``build.lock`` (the pins and their hashes) and ``--relock``;
- ``fetch``: the npm Pyodide package, pip's wheels and sdists (verified, cached under ``.cache/``), terser;
- ``slim``: what a wheel or the standard library loses (rules, the import-graph pruner, NumPy's stand-ins);
- ``zips``: deterministic zips and wheels (zopfli when installed);
- ``patches``: the upstream changes, as patch files under ``patches/<dist>-<version>/``, and ``--check-patches``;
- ``node``: steps that run Python 3.13 inside the npm Pyodide under Node (byte-compiling, template bytecode);
- ``kernels``: the WebAssembly kernels of ``site/src/worker/*.wat``, assembled by wabt into side modules;
- ``packages``: each shipped wheel made (slimmed, patched, compiled, cached) and the project's own wheel;
- ``assemble``: ``site/build/``: runtime, vendored JS/CSS, wheels, Pyodide's lock file, the manifest;
- ``serve``: the development server;
- ``cli``: the command line.
"""
