"""requirements.txt installs from binary wheels on every platform the README names, and not where it says it does not.

For each platform the check takes what the course needs there (requirements.txt and its dependencies, with their
environment markers evaluated for that platform) and asks pip, with --platform / --python-version /
--only-binary=:all:, for a wheel of each, failing with the name of a package that has none. pip evaluates the
markers of dependencies on the machine it runs on, not on the target (a Linux host would make a Mac need xgrammar's
Linux-only triton), so the dependency graph is walked here with `packaging`: from the metadata of the packages
installed here (what `make deps` put in this environment: this machine's resolution of requirements.txt, torch's
CPU build included) and, for a package the target needs that is not installed here, from pip's report of the wheel
it picks (--no-deps, one pip call per layer of the graph; versions chosen greedily, no backtracking). Each package
is checked at the version installed here; a package whose wheel here is pure Python (tag py3-none-any) installs on
every platform and is not asked for again. One pip call per platform then checks the rest. Results are cached under
build/wheel-check for a week per requirements.txt and environment.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

pytestmark = pytest.mark.xdist_group("wheels")  # one worker checks the four platforms at once, and caches them

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "requirements.txt"
CACHE = ROOT / "build" / "wheel-check"
CACHE_DAYS = 7
PYPI = "https://pypi.org/simple"
PYTHON = "3.11"  # the oldest Python the course supports (pyproject.toml)

# Pure-Python projects published as a source archive only: pip builds their wheel on any platform.
SOURCE_ONLY = {"jieba": "pure Python, published as a source archive only"}


@dataclass(frozen=True)
class Target:
    name: str
    tags: tuple[str, ...]  # pip's --platform values
    markers: dict  # PEP 508 environment of the target
    unsupported: str | None = None  # the package the README says has no wheel there


def _env(system: str, machine: str) -> dict:
    return {"sys_platform": {"Linux": "linux", "Darwin": "darwin"}[system], "platform_system": system,
            "platform_machine": machine, "os_name": "posix", "python_version": PYTHON,
            "python_full_version": f"{PYTHON}.0", "implementation_name": "cpython",
            "platform_python_implementation": "CPython"}


def _glibc_2_28(arch: str) -> tuple[str, ...]:
    """The wheel tags a Linux with glibc 2.28 (what torch 2.13's wheels need) installs: manylinux_2_28 down to
    manylinux_2_17 and its older name manylinux2014 (pip expands macOS versions itself, not these)."""
    return (*(f"manylinux_2_{minor}_{arch}" for minor in range(28, 16, -1)), f"manylinux2014_{arch}")


TARGETS = [
    Target("Linux x86-64", _glibc_2_28("x86_64"), _env("Linux", "x86_64")),
    Target("Linux aarch64", _glibc_2_28("aarch64"), _env("Linux", "aarch64")),
    Target("macOS arm64", ("macosx_14_0_arm64",), _env("Darwin", "arm64")),
    Target("macOS x86-64", ("macosx_14_0_x86_64",), _env("Darwin", "x86_64"), unsupported="torch"),
]


def installed(name: str) -> dict | None:
    """The package as installed here: version (public part: what PyPI has), dependencies, pure Python or not."""
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None
    tags = [line.split(":", 1)[1].strip() for line in (dist.read_text("WHEEL") or "").splitlines()
            if line.startswith("Tag:")]
    return {"version": Version(dist.version).public, "requires": list(dist.requires or []),
            "pure": bool(tags) and all(tag.endswith("-none-any") for tag in tags), "checked": False}


@dataclass
class Walk:
    """What one platform needs: name -> specifier, extras asked for, who asked first, the version taken."""
    target: Target
    specs: dict[str, SpecifierSet] = field(default_factory=dict)
    extras: dict[str, set[str]] = field(default_factory=dict)
    asked_by: dict[str, str] = field(default_factory=dict)
    picked: dict[str, dict] = field(default_factory=dict)

    def applies(self, req: Requirement, extras: set[str]) -> bool:
        return req.marker is None or any(req.marker.evaluate({**self.target.markers, "extra": e})
                                         for e in (extras or {""}))

    def need(self, req: Requirement, parent: str) -> set[str]:
        """Record a requirement; the packages whose version is still to be taken."""
        name = canonicalize_name(req.name)
        known, extras = name in self.specs, set(self.extras.get(name, ()))
        self.specs[name] = self.specs.get(name, SpecifierSet()) & req.specifier
        self.extras.setdefault(name, set()).update(req.extras)
        self.asked_by.setdefault(name, parent)
        got = self.picked.get(name)
        if not known or (got and not self.specs[name].contains(got["version"], prereleases=True)):
            self.picked.pop(name, None)
            return {name}
        return self.expand(name) if got and extras != self.extras[name] else set()

    def take(self, name: str, got: dict) -> set[str]:
        self.picked[name] = got
        return self.expand(name)

    def expand(self, name: str) -> set[str]:
        todo = set()
        for line in self.picked[name]["requires"]:
            dep = Requirement(line)
            if self.applies(dep, self.extras[name]):
                todo |= self.need(dep, name)
        return todo


def _pip(target: Target, lines: list[str], workdir: Path, asked_by: dict[str, str]) -> tuple[dict, dict]:
    """pip's wheel for each requirement line on the target, without following dependencies: (name -> its metadata,
    name -> why it has none), pip asked again without each package it names until it finds the rest."""
    cmd = [sys.executable, "-m", "pip", "install", "--isolated", "--dry-run", "--ignore-installed", "--no-deps",
           "--quiet", "--target", str(workdir / "target"), "--report", str(workdir / "report.json"),
           "--only-binary=:all:", "--python-version", PYTHON, "--implementation", "cp", "--index-url", PYPI,
           "--timeout", "30", "-r", str(workdir / "want.txt"), *(a for tag in target.tags for a in ("--platform", tag))]
    lines, missing = list(lines), {}
    while lines:
        (workdir / "want.txt").write_text("\n".join(lines) + "\n")
        # fast-deps reads a wheel's metadata with HTTP range requests instead of downloading it (torch's Linux
        # wheel is 0.5 GB); a pip that no longer has the option downloads.
        proc = subprocess.run([*cmd, "--use-feature=fast-deps"], capture_output=True, text=True)
        if "fast-deps" in proc.stderr and "invalid choice" in proc.stderr:
            proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode == 0:
            break
        found = re.search(r"(?:No matching distribution found for|Cannot install) ([A-Za-z0-9._-]+)", proc.stderr)
        if not found:
            raise RuntimeError(f"pip failed for {target.name}:\n{proc.stderr[-3000:]}")
        name = canonicalize_name(found.group(1))
        line = next(line for line in lines if canonicalize_name(Requirement(line).name) == name)
        versions = re.search(r"\(from versions: ([^)]*)\)", proc.stderr)
        missing[name] = (f"no binary wheel of {line} for {target.name}, Python {PYTHON} (versions with one: "
                         f"{versions.group(1) if versions else 'none'}; needed by {asked_by.get(name, '?')})")
        lines.remove(line)
    if not lines:
        return {}, missing
    report = json.loads((workdir / "report.json").read_text())
    return {canonicalize_name(item["metadata"]["name"]): {
        "version": Version(item["metadata"]["version"]).public, "pure": False, "checked": True,
        "requires": item["metadata"].get("requires_dist", [])} for item in report["install"]}, missing


def resolve(target: Target, workdir: Path) -> dict:
    """{"packages": name -> version} of everything the target needs, and {"missing": name -> why} for each
    package without a wheel (its own dependencies are then not followed)."""
    walk, todo, missing = Walk(target), set(), {}
    for raw in REQUIREMENTS.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line and not line.startswith("-") and walk.applies(req := Requirement(line), set()):
            todo |= walk.need(req, "requirements.txt")
    while todo:
        batch, todo, ask = sorted(todo), set(), []
        for name in batch:
            here = installed(name)
            if here and walk.specs[name].contains(here["version"], prereleases=True):
                todo |= walk.take(name, here)
            elif name in SOURCE_ONLY:
                todo |= walk.take(name, {"version": "", "requires": [], "pure": True, "checked": True})
            else:
                ask.append(name)
        if ask:  # needed on the target, not installed here: pip picks its wheel and says what it depends on
            got, none = _pip(target, [f"{n}{walk.specs[n]}" for n in ask], workdir, walk.asked_by)
            missing |= none
            for name in got:
                todo |= walk.take(name, got[name])
    rest = [f"{name}=={got['version']}" for name, got in sorted(walk.picked.items())
            if not got["pure"] and not got["checked"]]
    missing |= _pip(target, rest, workdir, walk.asked_by)[1]
    packages = {name: got["version"] or "(source)" for name, got in sorted(walk.picked.items())}
    return {"packages": packages, "missing": dict(sorted(missing.items()))}


def _pypi_reachable() -> str | None:
    try:
        urllib.request.urlopen(f"{PYPI}/pip/", timeout=15).close()
        return None
    except OSError as e:
        return f"PyPI is unreachable from here ({e}): the wheel check needs it"


def _environment() -> list[str]:
    return sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions())


def _cache_file(target: Target) -> Path:
    key = hashlib.sha256(json.dumps([REQUIREMENTS.read_text(), target.name, PYTHON, _environment()]).encode())
    return CACHE / f"{re.sub(r'[^a-z0-9]+', '-', target.name.lower())}-{key.hexdigest()[:12]}.json"


def _fresh(path: Path) -> bool:
    return path.exists() and time.time() - path.stat().st_mtime < CACHE_DAYS * 86400


def _check(target: Target, tmp: Path) -> dict:
    path = _cache_file(target)
    if _fresh(path):
        return json.loads(path.read_text())
    result = resolve(target, tmp)
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    return result


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> dict[str, dict]:
    """Every platform's result, the four checked side by side (pip mostly waits on the network)."""
    if not all(_fresh(_cache_file(t)) for t in TARGETS) and (why := _pypi_reachable()):
        pytest.skip(why)
    with ThreadPoolExecutor(len(TARGETS)) as pool:
        results = list(pool.map(lambda t: _check(t, tmp_path_factory.mktemp("pip")), TARGETS))
    return {t.name: r for t, r in zip(TARGETS, results)}


@pytest.mark.parametrize("target", TARGETS, ids=[t.name.replace(" ", "-") for t in TARGETS])
def test_requirements_install_from_wheels(target, checked):
    result = checked[target.name]
    missing = result["missing"]
    if target.unsupported:
        assert target.unsupported in missing, (
            f"the README says the course does not install on {target.name} because {target.unsupported} has no wheel "
            f"there, but the check found one; without a wheel: {missing or 'nothing'}: update the README")
        return
    assert not missing, f"{target.name}: " + "; ".join(missing.values())
    assert "torch" in result["packages"], f"{target.name}: torch is not among {sorted(result['packages'])}"
