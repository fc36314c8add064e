"""What a release promises, checked where it is stated: the supported Pythons (classifiers,
cibuildwheel's build list, the CI matrix, the README, scripts/find_python.sh), the workflow
files, and, against an installed wheel: its platform tag, an extension without debug
information, and every package the test suite imports conditionally (so that no test is
skipped there for a missing package).
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import os
import re
import struct
import sys
from pathlib import Path

import pytest
from project.helpers import CP, PYTHONS

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
WORKFLOWS = ROOT / ".github" / "workflows"
INSTALLED = os.environ.get("ZARRDB_TEST_INSTALLED") == "1"

needs_checkout = pytest.mark.skipif(
    not (ROOT / "pyproject.toml").is_file() or not (ROOT / "README.md").is_file(),
    reason="pyproject.toml and README.md are not beside the tests",
)
needs_workflows = pytest.mark.skipif(
    not WORKFLOWS.is_dir(), reason=".github/workflows is not beside the tests (an sdist)"
)
needs_installed = pytest.mark.skipif(
    not INSTALLED, reason="ZARRDB_TEST_INSTALLED=1 is set where the tests run against a wheel"
)


def _pyproject() -> dict:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _yaml(name: str) -> dict:
    import yaml

    # YAML 1.1 reads the key `on` as True.
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    if True in data:
        data["on"] = data.pop(True)
    return data


# --- the supported Pythons, stated in five places --------------------------------------------


@needs_checkout
def test_classifiers_name_exactly_the_supported_pythons():
    classifiers = _pyproject()["project"]["classifiers"]
    found = sorted(
        c.rsplit(" :: ", 1)[1]
        for c in classifiers
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    )
    assert found == list(PYTHONS)


@needs_checkout
def test_classifiers_name_the_platforms_the_wheels_are_built_for():
    """One operating-system classifier per platform cibuildwheel builds for, CPython only (the
    extension uses CPython's C API; the build list has no PyPy), and the typed marker that
    py.typed promises."""
    project = _pyproject()["project"]
    classifiers = set(project["classifiers"])
    systems = {c for c in classifiers if c.startswith("Operating System :: ")}
    by_platform = {
        "linux": "Operating System :: POSIX :: Linux",
        "macos": "Operating System :: MacOS",
        "windows": "Operating System :: Microsoft :: Windows",
    }
    built = {plat for plat in by_platform if _pyproject()["tool"]["cibuildwheel"][plat]["archs"]}
    assert systems == {by_platform[plat] for plat in built}
    implementations = {c for c in classifiers if " :: Implementation :: " in c}
    assert implementations == {"Programming Language :: Python :: Implementation :: CPython"}
    builds = _pyproject()["tool"]["cibuildwheel"]["build"].split()
    assert not any(b.startswith("pp") for b in builds)
    assert "Typing :: Typed" in classifiers
    assert (ROOT / "src" / "zarrdb" / "py.typed").is_file()


@needs_checkout
def test_project_urls_lead_to_the_issues_and_the_changelog():
    urls = _pyproject()["project"]["urls"]
    site = re.search(r"^site_url: (\S+)$", (ROOT / "mkdocs.yml").read_text(), re.MULTILINE)[1]
    assert urls["Documentation"] == site
    assert urls["Issues"] == urls["Source"] + "/issues"
    assert urls["Changelog"] == site + "changelog/"
    assert (ROOT / "docs" / "changelog.md").is_file()


def test_installed_metadata_carries_the_classifiers_and_urls():
    """What pip and PyPI show comes from the installed distribution's METADATA, not from
    pyproject.toml."""
    metadata = importlib.metadata.metadata("zarrdb")
    classifiers = metadata.get_all("Classifier") or []
    assert "Typing :: Typed" in classifiers
    assert "Programming Language :: Python :: Implementation :: CPython" in classifiers
    assert sum(c.startswith("Operating System :: ") for c in classifiers) == 3
    urls = dict(u.split(", ", 1) for u in metadata.get_all("Project-URL") or [])
    assert set(urls) >= {"Source", "Documentation", "Issues", "Changelog"}
    assert urls["Issues"].endswith("/issues")


@needs_checkout
def test_cibuildwheel_selects_exactly_the_supported_pythons():
    build = _pyproject()["tool"]["cibuildwheel"]["build"].split()
    assert build == [f"{cp}-*" for cp in CP]  # "cp314-*" leaves out cp314t, free-threaded


@needs_checkout
def test_readme_states_the_supported_pythons():
    readme = (ROOT / "README.md").read_text()
    listed = ", ".join(PYTHONS[:-1]) + f" and {PYTHONS[-1]}"
    assert f"Binary wheels are built for CPython {listed}" in readme
    table = readme.split("## Supported versions", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| 3.")]
    in_table = sorted(v for row in rows for v in re.findall(r"3\.\d+", row.split("|")[1]))
    assert in_table == list(PYTHONS)


@needs_checkout
def test_find_python_accepts_exactly_the_supported_pythons():
    script = (ROOT / "scripts" / "find_python.sh").read_text()
    low, high = PYTHONS[0].split(".")[1], PYTHONS[-1].split(".")[1]
    assert f"(3, {low}) <= sys.version_info[:2] <= (3, {high})" in script


@needs_workflows
def test_ci_tests_every_supported_python_on_every_platform():
    ci = _yaml("ci.yml")
    matrix = ci["jobs"]["test"]["strategy"]["matrix"]
    assert [str(v) for v in matrix["python"]] == list(PYTHONS)
    assert {"ubuntu-latest", "macos-latest", "windows-latest"} <= set(matrix["os"])


# --- the workflow files ------------------------------------------------------------------------


@needs_workflows
def test_workflow_files_parse():
    for path in sorted(WORKFLOWS.glob("*.yml")):
        data = _yaml(path.name)
        assert data["on"] and data["jobs"], path.name
        for name, job in data["jobs"].items():
            assert "runs-on" in job and job["steps"], (path.name, name)
            for step in job["steps"]:
                assert ("uses" in step) != ("run" in step), (path.name, name, step)


@needs_workflows
@needs_checkout
def test_wheel_workflow_has_a_runner_for_every_architecture_cibuildwheel_builds():
    """The workflow gives each job one architecture (CIBW_ARCHS); together the jobs must cover
    every architecture of [tool.cibuildwheel], for every Python of the build list."""
    config = _pyproject()["tool"]["cibuildwheel"]
    wanted = {
        (plat, arch) for plat in ("linux", "macos", "windows") for arch in config[plat]["archs"]
    }
    wheels = _yaml("wheels.yml")
    job = wheels["jobs"]["wheels"]
    runners = {
        (
            "linux" if "ubuntu" in e["os"] else "macos" if "macos" in e["os"] else "windows",
            e["arch"],
        )
        for e in job["strategy"]["matrix"]["include"]
    }
    assert runners == wanted
    step = next(s for s in job["steps"] if str(s.get("uses", "")).startswith("pypa/cibuildwheel"))
    assert step["env"]["CIBW_ARCHS"] == "${{ matrix.arch }}"
    assert "CIBW_BUILD" not in step["env"]  # the Pythons come from pyproject.toml


# --- Linux wheel tags --------------------------------------------------------------------------


@needs_checkout
def test_readme_names_the_images_the_linux_wheels_are_built_in():
    linux = _pyproject()["tool"]["cibuildwheel"]["linux"]
    readme = (ROOT / "README.md").read_text()
    for key in ("manylinux-x86_64-image", "manylinux-aarch64-image", "musllinux-x86_64-image"):
        assert f"`{linux[key]}`" in readme, key
    assert "glibc 2.28 or newer" in readme and linux["manylinux-x86_64-image"] == "manylinux_2_28"


@pytest.mark.skipif(
    not os.environ.get("ZARRDB_WHEEL_PLATFORM"),
    reason="ZARRDB_WHEEL_PLATFORM names the platform tag of the wheel under test (cibuildwheel)",
)
def test_installed_wheel_carries_the_published_platform_tag():
    expected = os.environ["ZARRDB_WHEEL_PLATFORM"]  # e.g. manylinux_2_28
    wheel = importlib.metadata.distribution("zarrdb").read_text("WHEEL") or ""
    platforms = {line.split("-")[-1] for line in wheel.splitlines() if line.startswith("Tag: ")}
    assert any(p.startswith(expected + "_") for p in platforms), platforms
    family, major, minor = expected.rsplit("_", 2)
    for platform in platforms:
        # No tag asks for a newer C library than the README promises.
        found = re.match(rf"{family}_(\d+)_(\d+)_", platform)
        if found:
            assert (int(found[1]), int(found[2])) <= (int(major), int(minor)), platform


# --- the extension of a release build ----------------------------------------------------------


def _elf_section_names(path: str) -> list[str]:
    data = Path(path).read_bytes()
    assert data[:4] == b"\x7fELF"
    is64, order = data[4] == 2, "<" if data[5] == 1 else ">"
    if is64:
        (shoff,) = struct.unpack_from(order + "Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", data, 0x3A)
    else:
        (shoff,) = struct.unpack_from(order + "I", data, 0x20)
        shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", data, 0x2E)

    def section(i: int) -> tuple[int, int]:
        base = shoff + i * shentsize
        (name,) = struct.unpack_from(order + "I", data, base)
        offset_at = base + (0x18 if is64 else 0x10)
        (offset,) = struct.unpack_from(order + ("Q" if is64 else "I"), data, offset_at)
        return name, offset

    strings = section(shstrndx)[1]
    names = []
    for i in range(shnum):
        start = strings + section(i)[0]
        names.append(data[start : data.index(b"\0", start)].decode())
    return names


@needs_installed
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF sections (Linux)")
def test_installed_extension_has_no_debug_information():
    from zarrdb import _core

    names = _elf_section_names(_core.__file__)
    assert ".text" in names and ".dynsym" in names  # the reader works
    assert [n for n in names if n.startswith((".debug", ".zdebug"))] == []


# --- the test extra -----------------------------------------------------------------------------

# Modules whose distribution has another name.
DISTRIBUTION_OF = {"yaml": "pyyaml", "zarr_sqlite": "zarr-sqlite", "Cython": "cython"}


def _conditionally_imported() -> dict[str, str]:
    """Modules the tests import only if installed (importorskip, find_spec): module -> file."""
    found = {}
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", None))
                in ("importorskip", "find_spec")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                found.setdefault(node.args[0].value.split(".")[0], path.name)
    return found


def _test_requirements() -> dict[str, tuple]:
    """The test extra's requirements by distribution name, with the extras it names
    (zarrdb[dask]) expanded: name -> (requirement, the extra it belongs to)."""
    from packaging.requirements import Requirement

    every = [Requirement(r) for r in importlib.metadata.requires("zarrdb") or []]

    def of_extra(extra: str) -> dict[str, tuple]:
        out = {}
        for req in every:
            # whether the requirement belongs to this extra, whatever Python this is
            if req.marker is None or f'extra == "{extra}"' not in str(req.marker):
                continue
            if req.name == "zarrdb":
                for inner in sorted(req.extras):
                    out.update(of_extra(inner))
            else:
                out[req.name.lower().replace("_", "-")] = (req, extra)
        return out

    return of_extra("test")


def test_the_scan_finds_the_conditional_imports():
    found = _conditionally_imported()
    assert {"zarr_sqlite", "fsspec", "xarray", "dask", "cibuildwheel"} <= set(found), found


def test_the_test_extra_lists_every_package_the_tests_import_conditionally():
    requirements = _test_requirements()
    missing = {
        module: where
        for module, where in _conditionally_imported().items()
        if DISTRIBUTION_OF.get(module, module.replace("_", "-")).lower() not in requirements
        and module != "pandas"  # comes with xarray
    }
    assert missing == {}


@needs_installed
def test_every_package_the_tests_import_conditionally_is_installed():
    """Against an installed wheel with the test extra, nothing is skipped for want of a
    package, except where the extra itself leaves it out (zarr-sqlite before Python 3.12)."""
    requirements = _test_requirements()
    problems = []
    for module, where in _conditionally_imported().items():
        if importlib.util.find_spec(module) is not None:
            continue
        dist = DISTRIBUTION_OF.get(module, module.replace("_", "-")).lower()
        req, extra = requirements.get(dist, (None, None))
        if req is None or req.marker.evaluate({"extra": extra}):
            problems.append(f"{where} imports {module}, which is not installed")
    assert problems == []


@needs_checkout
def test_the_test_extra_builds_with_the_build_requirements():
    """The sdist tests build one: the test extra asks for the build requirements, at the same
    floors."""
    project = _pyproject()
    extra = {
        r.split(">=")[0].lower(): r for r in project["project"]["optional-dependencies"]["test"]
    }
    for requirement in project["build-system"]["requires"]:
        assert extra.get(requirement.split(">=")[0].lower()) == requirement
