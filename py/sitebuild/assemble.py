"""``site/build/``: the Pyodide runtime, BokehJS and Panel's JS/CSS, every wheel, Pyodide's lock file, and the
manifest that the page, the worker and the service worker read.

The facts those three share (``site_facts()``: the cache-name prefix, the hand-written shell files, the loading
stages and their labels, the CDN that NumPy may come from) are written here once: into the manifest, which the
page and the worker read, and into ``build/site-facts.js``, which the service worker imports (it has to answer
requests before it could fetch a manifest). The build id (a hash of every file) is the manifest's.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import shutil
import tempfile
import urllib.parse
import zipfile
from pathlib import Path

from . import first_view, lesson_js, zips
from .bundle import BUNDLES, write_bundles
from .common import CACHE, PY_DIR, SITE, BuildError, log, run, sha256_file
from .fetch import (
    cached_or_download,
    fetch_pyodide,
    minified_runtime_js,
    official_lock,
    pip_sdist_args,
    pip_wheel_args,
    terser_minified,
)
from .kernels import GEMM, write_kernels
from .lock import canonical, read_lock
from .node import NODE
from .packages import (
    PROCESS_VERSION,
    WHEEL_OPTIMIZE,
    WheelJob,
    compiled_stdlib,
    process_wheels,
    project_packages,
    project_tree,
    pyodide_dir_wheels,
    sdist_to_tree,
    template_bytecode,
    unpack_importable,
)
from .patches import apply_patches, patch_key, patches_for
from .slim import NOT_SHIPPED, SLIM_RULES, VENDORED_SLIM_RULES, slim_filter, unpack_vendored, vendored_stubs
from .zips import DEFLATE, gzip_file

# Files in site/ that are hand-written (copied when building into another folder).
HAND_WRITTEN = ("index.html", "embed.html", "fetcher.js", "snapshot.js", "portable.js", "prelude.py", "boot.py",
                "style.css")
# The site's shell: the hand-written files and the scripts bundle.py writes from site/src/ (loader.js, worker.js,
# sw.js). Fetched without revalidation, network first (sw.js): they change with a rebuild under the same URL.
SHELL_FILES = (*HAND_WRITTEN, *BUNDLES.values())
# The pages of the site (both load loader.js; embed.html shows one view).
PAGES = ("index.html", "embed.html")
# The runtime default for packages that are not vendored (binary wasm wheels such as NumPy).
PYODIDE_CDN_ORIGIN = "https://cdn.jsdelivr.net"
PYODIDE_CDN = PYODIDE_CDN_ORIGIN + "/pyodide/v{version}/full/"
# Relative to the page: Panel's document JSON names its CSS under this prefix (see worker.js / prelude.py).
PANEL_CDN_ROOT = "./build/vendor/"
# BokehJS bundles the main thread loads, in order (panel.min.js last: it extends the Bokeh global).
BOKEH_JS = ("bokeh.min.js", "bokeh-widgets.min.js", "bokeh-tables.min.js")
# Pyodide runtime files the browser needs (the rest of the npm package is docs, types and Node glue). pyodide.js,
# the classic-script form of pyodide.mjs, is for the portable file's worker only (see site/portable.js).
RUNTIME_FILES = ("pyodide.mjs", "pyodide.js", "pyodide.asm.js", "pyodide.asm.wasm")
# Panel's stylesheets: layout/widget CSS, design themes, spinner images; not the 90 MB of bundled 3rd-party
# libraries (tabulator, vtk, deck.gl, ...) this app does not use.
PANEL_DIST = re.compile(r"^panel/dist/(panel\.min\.js|css/.*|assets/.*\.svg|bundled/(theme|css)/.*)$")
APP_WHEEL = ("slm_playground", "0.1.0")
# The app's stylesheet (in py/), served as it is, relative to the page: every component of the document links it
# (playground.app.add_styles) instead of each one's model carrying a copy of its text.
APP_STYLESHEET_SOURCE = "playground/views/styles.css"
APP_STYLESHEET = "./build/app.css"
# Files the site also ships gzip-compressed, for static hosts that send them as they are (many compress neither
# wasm nor JavaScript): a first visit downloads the copy and inflates it, the wasm in the worker
# (worker/gzip-copy.js), the page's scripts (`main_js`, added by build()) in the page (page/scripts.js).
GZIP_COPIES = ("build/pyodide/pyodide.asm.wasm",)
# Packages `import panel` does not need, which the app's code may (Markdown renders the widgets' tooltips; Bokeh reads
# YAML config files and themes with PyYAML, bokeh patch 0004; slm reads a GGUF file with gguf, imported only then):
# they load with the app's wheel in the "app" stage, requested after the other wheels and installed while
# prelude.py imports Panel (site/worker.js).
APP_STAGE_PACKAGES = ("markdown-it-py", "mdit-py-plugins", "linkify-it-py", "uc-micro-py", "mdurl", "pyyaml", "gguf")
# The packages stage in the order prelude.py imports from it: (module, the packages importing it needs). worker.js
# requests each group once the one before it is in and installs it, and prelude.py imports its module while the next
# group downloads; the stage's other packages (what `import panel` needs besides) come last. On a slow link the
# imports then run while the link is busy, not after its last byte.
IMPORT_GROUPS = (("numpy", ("numpy",)), ("bokeh.models", ("jinja2", "markupsafe", "packaging", "bokeh")))
# What the learner's worker installs (site/src/worker/learner.js): checks import NumPy and slm, and `lessons` (in
# the app's wheel) imports markdown-it. Not Panel: that worker starts in a fraction of the app's time.
LEARNER_PACKAGES = ("numpy", APP_WHEEL[0], "markdown-it-py", "mdit-py-plugins", "mdurl")
FACTS_FILE = "build/site-facts.js"
# The portable edition (one HTML file, site/portable.js): written when every package is vendored; the hosted page
# saves the same file under the same name.
PORTABLE_NAME = "transformer-playground.html"
PORTABLE_FILE = f"build/{PORTABLE_NAME}"


def site_facts(main_js: list[str]) -> dict:
    """What loader.js, worker.js and sw.js share; each reads it from here (manifest / site-facts.js).
    `main_js`: the page's scripts, in order (write_browser_assets); each has a gzip copy."""
    return {
        "cache_prefix": "slm-site-",  # + build id: the service worker's cache, which also holds the snapshot
        "shell_files": list(SHELL_FILES),
        "pages": list(PAGES),
        "stages": {"runtime": "Pyodide runtime", "packages": "Python packages", "app": "App code"},
        "cdn": PYODIDE_CDN_ORIGIN + "/pyodide/",
        "manifest": "build/manifest.json",
        "facts": FACTS_FILE,
        "portable_name": PORTABLE_NAME,
        # Files of the manifest the progress bar leaves out: those a visit of the hosted site does not load, and
        # the first view, which the page loads before the progress starts.
        "not_loaded": ["build/manifest.json", FACTS_FILE, "build/pyodide/pyodide.js", first_view.FIRST_VIEW_FILE,
                       lesson_js.LESSON_JS, lesson_js.LESSON_LIBS],
        # The lesson panel's scripts (sitebuild/lesson_js.py), loaded when a lesson opens.
        "lesson_js": lesson_js.LESSON_JS,
        "lesson_libs": lesson_js.LESSON_LIBS,
        "main_js": main_js,
        "gemm": GEMM,
        "gzip_copies": {rel: f"{rel}.gz" for rel in (*GZIP_COPIES, *main_js)},
    }


def pyodide_cdn(lock: dict) -> str:
    return PYODIDE_CDN.format(version=lock["pyodide"]["version"])


def build(site: Path = SITE, py_dir: Path = PY_DIR, pyodide_packages: Path | None = None,
          hub_mirrors: list[str] = (), lesson_origins: list[str] = (), prepare: bool = False) -> dict | None:
    """Build the site into ``site``; with ``prepare``, only fill .cache/ with what every build reuses (downloads,
    minified scripts, compiled wheels and standard library, the first view's environment when this Python lacks
    the pins) and stop before the steps that need Panel."""
    lesson_sources(lesson_origins)  # a wrong origin stops the build before it downloads anything
    lock = read_lock()
    project_packages(py_dir)  # check the inputs before downloading anything
    if DEFLATE != "zopfli":
        log("zips deflated by zlib, ~0.3 MB larger than by zopfli ("
            + ("SITE_DEFLATE=zlib)" if zips.zopfli_compress else "pip install zopfli)"))
    pkg = fetch_pyodide(lock)
    official = official_lock(pkg)
    vendored = pyodide_dir_wheels(pyodide_packages, lock, official) if pyodide_packages else {}
    wheels = cached_or_download(lock["wheels"], CACHE / "wheels", pip_wheel_args(CACHE / "wheels"), "wheel")
    sdists = cached_or_download(lock["sdists"], CACHE / "sdists",
                                pip_sdist_args(CACHE / "sdists", lock["sdists"]), "sdist")
    out = site / "build"
    if site.resolve() != SITE.resolve():
        site.mkdir(parents=True, exist_ok=True)
        for name in HAND_WRITTEN:
            shutil.copyfile(SITE / name, site / name)
    write_bundles(SITE / "src", site)
    shutil.rmtree(out, ignore_errors=True)
    (out / "wheels").mkdir(parents=True)

    write_runtime(pkg, lock, out / "pyodide")
    write_kernels(site, lock)
    main_js = write_browser_assets(wheels, lock, out / "vendor")
    lesson_js.write(site, lock)
    facts = site_facts(main_js)
    write_gzip_copies(site, facts["gzip_copies"])
    entries = write_wheels(pkg, lock, wheels, sdists, py_dir, out / "wheels")
    remote = write_vendored(pkg, lock, official, vendored, entries, out / "wheels")
    if prepare:
        first_view.prepare(lock, log)
        log(f"prepared {CACHE}: later builds reuse what it holds")
        return None
    shutil.copyfile(py_dir / APP_STYLESHEET_SOURCE, site / APP_STYLESHEET)
    prerendered = first_view.write(site, py_dir, PANEL_CDN_ROOT, APP_STYLESHEET, lock, log)
    if "numpy" in vendored:
        made_bytecode = template_bytecode(pkg, entries, out / "wheels")
        if made_bytecode:
            entries[made_bytecode["name"]] = made_bytecode
    packages = write_pyodide_lock(official, entries, remote, out / "pyodide-lock.json")
    (site / FACTS_FILE).write_text(f"// Written by build.py (sitebuild/assemble.py): read by sw.js.\n"
                                   f"self.siteFacts = {json.dumps(facts, indent=1)};\n")
    manifest = write_manifest(site, lock, facts, packages, remote, prerendered)
    check_csp(site, bool(remote), hub_mirrors, lesson_origins)
    if remote:
        log(f"no portable file ({PORTABLE_FILE}): {', '.join(remote)} is not vendored (--pyodide-packages DIR)")
    else:
        run(["node", str(NODE / "portable.mjs"), str(site), str(site / PORTABLE_FILE)])
        log(f"wrote {site / PORTABLE_FILE} ({(site / PORTABLE_FILE).stat().st_size / 1e6:.1f} MB)")
    total = sum(f["size"] for f in manifest["files"].values())
    log(f"wrote {out} ({total / 1e6:.1f} MB in {len(manifest['files'])} files; build {manifest['build_id']}; "
        f"{'NumPy from ' + pyodide_cdn(lock) if remote else 'all packages vendored'})")
    return manifest


def write_gzip_copies(site: Path, copies: dict[str, str]) -> None:
    """Each gzip copy (file -> copy, relative to `site`), the same bytes for the same input (zips.gzip_file; zopfli
    takes ~20 s for the wasm, so the result is cached)."""
    for rel, copy in copies.items():
        data = (site / rel).read_bytes()
        cache = CACHE / "site" / f"{hashlib.sha256(data).hexdigest()[:16]}-{DEFLATE}-{Path(rel).name}.gz"
        if not cache.exists():
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_bytes(gzip_file(data))
        shutil.copyfile(cache, site / copy)


def write_runtime(pkg: Path, lock: dict, dest: Path) -> None:
    """The npm files the browser needs, Pyodide's JavaScript minified, and a byte-compiled stdlib."""
    dest.mkdir()
    for name in RUNTIME_FILES:
        shutil.copyfile(minified_runtime_js(pkg, lock) if name == "pyodide.asm.js" else pkg / name, dest / name)
    shutil.copyfile(compiled_stdlib(pkg, lock), dest / "python_stdlib.zip")


def write_browser_assets(wheels: dict[str, Path], lock: dict, vendor: Path) -> list[str]:
    """Main-thread JS/CSS, from the same wheels the worker imports; returns the scripts the page loads, in order."""
    panel_version = lock["wheels"]["panel"]["version"]
    (vendor / "bokeh").mkdir(parents=True)
    patched = bool(patches_for("bokehjs", lock["wheels"]["bokeh"]["version"]))
    with zipfile.ZipFile(wheels["bokeh"]) as zf:
        for js in BOKEH_JS:
            if js == "bokeh.min.js" and patched:
                shutil.copyfile(patched_bokehjs(wheels["bokeh"], lock), vendor / "bokeh" / js)
            else:
                (vendor / "bokeh" / js).write_bytes(zf.read(f"bokeh/server/static/js/{js}"))
    dist = vendor / panel_version / "dist"
    with zipfile.ZipFile(wheels["panel"]) as zf:
        for n in zf.namelist():
            if PANEL_DIST.match(n):
                (dist / n[len("panel/dist/"):]).parent.mkdir(parents=True, exist_ok=True)
                (dist / n[len("panel/dist/"):]).write_bytes(zf.read(n))
    return [f"build/vendor/bokeh/{js}" for js in BOKEH_JS] + [f"build/vendor/{panel_version}/dist/panel.min.js"]


def patched_bokehjs(wheel: Path, lock: dict) -> Path:
    """BokehJS's main bundle with the bokehjs patches applied to its readable ``bokeh.js``, then minified by terser
    (1.26 MB, a little smaller than the wheel's own bokeh.min.js); cached by the patched file's content."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp)
        with zipfile.ZipFile(wheel) as zf:
            zf.extract("bokeh/server/static/js/bokeh.js", tree)
        apply_patches(tree, "bokehjs", lock["wheels"]["bokeh"]["version"])
        return terser_minified(tree / "bokeh/server/static/js/bokeh.js", lock, "BokehJS with its patches")


def write_wheels(pkg: Path, lock: dict, wheels: dict[str, Path], sdists: dict[str, Path], py_dir: Path,
                 pub: Path) -> dict[str, dict]:
    """Slimmed, patched, compiled pure wheels; pure wheels built from sdists; the project's wheel."""
    jobs, made_as = [], []
    for name, whl in wheels.items():
        e = lock["wheels"][name]
        patches = patch_key(name, e["version"])
        key = f"{PROCESS_VERSION}|{e['sha256']}|{SLIM_RULES.get(name)}|{SLIM_RULES['*']}|{NOT_SHIPPED}|{patches}"
        make = functools.partial(unpack_importable, whl, keep=slim_filter(name, e["version"]), dist=name,
                                 version=e["version"])
        jobs.append(WheelJob(make, e["file"], key))
        made_as.append((name, e))
    for name, sd in sdists.items():
        e = lock["sdists"][name]
        fname = f"{e['dist_name']}-{e['version']}-py3-none-any.whl"
        jobs.append(WheelJob(functools.partial(sdist_to_tree, sd, e), fname,
                             f"{PROCESS_VERSION}|{e['sha256']}|{e['package_dirs']}"))
        made_as.append((name, e))
    made = process_wheels(pkg, jobs, pub, "legacy", WHEEL_OPTIMIZE)
    entries = {name: {"name": name, "version": e["version"], "path": path, "imports": e["imports"]}
               for (name, e), path in zip(made_as, made, strict=True)}
    make_project, project_hash = project_tree(py_dir)
    name, version = APP_WHEEL
    [made] = process_wheels(pkg, [WheelJob(make_project, f"{name}-{version}-py3-none-any.whl",
                                           f"{PROCESS_VERSION}|{project_hash}")], pub, "hash")
    entries[name] = {"name": name, "version": version, "path": made,
                     "imports": [p.name for p in project_packages(py_dir)]}
    return entries


def write_vendored(pkg: Path, lock: dict, official: dict, vendored: dict[str, Path], entries: dict[str, dict],
                   pub: Path) -> dict[str, dict]:
    """Binary packages: vendored from --pyodide-packages (into ``entries``), else fetched at run time from the
    Pyodide CDN (returned)."""
    remote: dict[str, dict] = {}
    for name, e in lock["pyodide_packages"].items():
        if name in vendored:
            # A vendored wasm build replaces the pure-Python fallback built above (e.g. MarkupSafe).
            for other in [k for k, v in lock["sdists"].items() if v["dist_name"].lower() == name]:
                entries.pop(other)["path"].unlink()
            whl = vendored[name]
            rules = (VENDORED_SLIM_RULES.get(name), VENDORED_SLIM_RULES["*"], vendored_stubs(name))
            key = f"{PROCESS_VERSION}|vendored|{sha256_file(whl)}|{rules}"
            [made] = process_wheels(pkg, [WheelJob(functools.partial(unpack_vendored, whl, name), whl.name, key)], pub,
                                    None)
            entries[name] = {"name": name, "version": e["version"], "path": made,
                             "imports": official["packages"][name]["imports"]}
        elif e.get("required"):
            remote[name] = {"name": name, "version": e["version"], "url": pyodide_cdn(lock) + e["file"],
                            "sha256": e["sha256"], "imports": official["packages"][name]["imports"]}
    return remote


def write_pyodide_lock(official: dict, entries: dict[str, dict], remote: dict[str, dict], path: Path) -> list[str]:
    """pyodide-lock.json in Pyodide's own schema (loadPackage() verifies each sha256 via fetch integrity)."""
    pkgs: dict[str, dict] = {}
    for name, e in sorted(entries.items()):
        pkgs[canonical(name)] = {"name": canonical(name), "version": e["version"],
                                 "file_name": f"wheels/{e['path'].name}", "install_dir": "site",
                                 "sha256": sha256_file(e["path"]), "package_type": "package",
                                 "imports": e["imports"], "depends": [], "unvendored_tests": False}
    for name, e in sorted(remote.items()):
        pkgs[canonical(name)] = {"name": canonical(name), "version": e["version"], "file_name": e["url"],
                                 "install_dir": "site", "sha256": e["sha256"], "package_type": "package",
                                 "imports": e["imports"], "depends": [], "unvendored_tests": False}
    path.write_text(json.dumps({"info": official["info"], "packages": pkgs}, indent=1))
    return sorted(pkgs)


def stage_of(rel: str, app_stage: set[str]) -> str:
    """The loading stage a file of the site belongs to (the progress bar's rows); `app_stage`: the wheels of the
    app and of APP_STAGE_PACKAGES."""
    return "app" if rel in app_stage else "packages" if "/wheels/" in rel else "runtime"


def write_manifest(site: Path, lock: dict, facts: dict, packages: list[str], remote: dict[str, dict],
                   prerendered: dict | None = None) -> dict:
    """What the loader fetches, each file's size and stage (progress bar, service worker), the build id."""
    out = site / "build"
    lock_entries = json.loads((out / "pyodide-lock.json").read_text())["packages"]
    app_stage = {f"build/{lock_entries[n]['file_name']}"
                 for n in (canonical(APP_WHEEL[0]), *APP_STAGE_PACKAGES) if n in lock_entries}
    files: dict[str, dict] = {}
    for p in sorted(out.rglob("*")):
        if p.is_file():
            rel = p.relative_to(site).as_posix()
            files[rel] = {"size": p.stat().st_size, "stage": stage_of(rel, app_stage)}
    for name in SHELL_FILES:
        files[name] = {"size": (site / name).stat().st_size, "stage": "runtime"}
    build_hash = hashlib.sha256()
    for rel in sorted(files):
        build_hash.update(rel.encode() + b"\0" + hashlib.sha256((site / rel).read_bytes()).digest())
    manifest = {
        "build_id": build_hash.hexdigest()[:16],
        "pyodide_version": lock["pyodide"]["version"],
        "panel_cdn_root": PANEL_CDN_ROOT,
        "app_module": "playground.app",
        "app_stylesheet": APP_STYLESHEET,
        "site": facts,
        "first_view": prerendered,  # sitebuild/first_view.py; null when the build could not render it
        "packages": packages,
        "import_groups": [{"module": module, "packages": [n for n in names if n in lock_entries]}
                          for module, names in IMPORT_GROUPS],
        "remote": {n: {"url": e["url"], "stage": "packages"} for n, e in remote.items()},
        "learner_packages": [canonical(n) for n in LEARNER_PACKAGES if canonical(n) in lock_entries],
        "files": files,
    }
    (site / facts["manifest"]).write_text(json.dumps(manifest, indent=1))
    return manifest


def hub_sources(mirrors: list[str] = ()) -> list[str]:
    """What connect-src lists for models opened from the Hub (py/playground/hub.py names its hosts): the Hub, the
    hosts its file URLs redirect to, and each configured mirror's origin (--hub-mirror)."""
    from playground.hub import DEFAULT_HUB, REDIRECT_HOSTS  # standard library only: safe to import in the builder

    origins = []
    for url in mirrors:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise BuildError(f"--hub-mirror {url!r}: give the mirror's base URL, e.g. https://hub.example.org")
        origins.append(f"{parts.scheme}://{parts.netloc}")
    return [DEFAULT_HUB, *REDIRECT_HOSTS, *dict.fromkeys(origins)]


# An origin as a CSP source: a host (or `*.` and a domain: its subdomains), and a port or `*` (any port).
ORIGIN_HOST = re.compile(r"(\*\.)?[a-z0-9-]+(\.[a-z0-9-]+)*(:(\d{1,5}|\*))?")


def lesson_sources(origins: list[str] = ()) -> list[str]:
    """What connect-src lists for lessons fetched from other sites (`?lesson=URL`, --lesson-origin): each URL's
    origin (a path is left out: the page may fetch any file of that site), checked to be nothing but an origin."""
    sources = []
    for url in origins:
        parts = urllib.parse.urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not ORIGIN_HOST.fullmatch(parts.netloc.lower()):
            raise BuildError(f"--lesson-origin {url!r}: give the origin lessons are fetched from, e.g. "
                             "https://courses.example.edu (or https://*.example.edu for its subdomains)")
        sources.append(f"{parts.scheme}://{parts.netloc.lower()}")
    return list(dict.fromkeys(sources))


def check_csp(site: Path, remote: bool, mirrors: list[str] = (), lesson_origins: list[str] = ()) -> None:
    """The pages' connect-src: this site, the Pyodide CDN only when something is fetched from it, the Hub's
    hosts and mirrors (models opened by name), and the origins lessons may be fetched from."""
    sources = ["'self'", *([PYODIDE_CDN_ORIGIN] if remote else []), *hub_sources(mirrors)]
    sources += [source for source in lesson_sources(lesson_origins) if source not in sources]
    for page in PAGES:
        path = site / page
        html = path.read_text()
        new = re.sub(r"connect-src 'self'[^;\"]*", "connect-src " + " ".join(sources), html)
        if "connect-src 'self'" not in new:
            raise BuildError(f"{path}: CSP meta with connect-src 'self' not found")
        if new != html:
            path.write_text(new)
