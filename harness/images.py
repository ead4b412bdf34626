"""Container images built without a registry.

There is no registry to pull from, so every image starts from a Debian root
filesystem that mmdebstrap builds from Debian's packages and `docker import`
turns into a base image. Two images are built FROM it:

  chaoslog-zookeeper   ZooKeeper 3.8 (Debian's libzookeeper-java, Java 17), in the foreground
  chaoslog-broker      Python 3.11 with the project and its dependencies, installed
                       offline from a wheelhouse built on the host; iptables and
                       iproute2 inside for network faults. Also runs workload workers.

Each image is tagged with a hash of its inputs, so "is it up to date?" is one
`docker image inspect`: a rebuild with nothing changed takes well under 5 s.

One more image is opt-in, because its build takes many minutes
(`chaoslog images --target tansu`, never part of `make test` or setup):

  chaoslog-tansu       the tansu broker (Rust, crates.io; images/tansu/crate.toml
                       pins version and features), compiled on the host with
                       `cargo install --locked`, on the base image
  chaoslog-tansu-postgres
                       its shared storage: PostgreSQL 17 from a Debian 13 root
                       filesystem (tansu 0.6.0 needs PostgreSQL 16 or later;
                       Debian 12 has 15), with tansu's schema
(harness/backends/tansu.py runs them.)
"""
from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.docker_engine import docker_client

ROOT = Path(__file__).resolve().parent.parent
IMAGE_DIR = ROOT / "images"
LABEL = "org.chaoslog.image"

SUITE = "bookworm"
BASE_PACKAGES = (
    "python3", "python3-venv", "ca-certificates",
    "openjdk-17-jre-headless", "libzookeeper-java", "liblog4j1.2-java", "libslf4j-java",
    "iptables", "iproute2", "procps",
)
# Host-side apt sources are reused inside the image: the build names no mirror.
APT_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
APT_SOURCES_FALLBACK = Path("/etc/apt/sources.list")

# Python packages the containers need (brokers and workload workers): the
# project's own dependencies, read from pyproject.toml.
PROJECT_SOURCES = ("contracts", "cluster", "harness", "faults", "reports", "pyproject.toml", "README.md")


class ImageError(RuntimeError):
    pass


def _say(msg: str) -> None:
    print(f"[images] {msg}", file=sys.stderr, flush=True)


def _hash(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()[:16]


def _tree_bytes(paths: list[Path]) -> bytes:
    """Names and contents of every source file under `paths`, in a stable order."""
    out = io.BytesIO()
    for top in paths:
        files = [top] if top.is_file() else sorted(
            p for p in top.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc",))
        for f in files:
            out.write(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes() + b"\0")
    return out.getvalue()


def _apt_sources() -> Path:
    for p in (APT_SOURCES, APT_SOURCES_FALLBACK):
        if p.exists() and p.stat().st_size:
            return p
    raise ImageError("no apt sources on this machine (/etc/apt/sources.list*): "
                     "the Debian root filesystem is built from the host's apt sources")


@dataclass(frozen=True)
class ImageSet:
    base: str
    zookeeper: str
    broker: str


def _project_requirements() -> list[str]:
    import tomllib
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return list(data["project"]["dependencies"])


def _tags() -> ImageSet:
    base = _hash(repr((SUITE, BASE_PACKAGES)).encode(), (IMAGE_DIR / "base.version").read_bytes())
    zk = _hash(base.encode(), _tree_bytes([IMAGE_DIR / "zookeeper"]))
    broker = _hash(base.encode(), _tree_bytes([IMAGE_DIR / "broker"]),
                   "\n".join(_project_requirements()).encode(),
                   _tree_bytes([ROOT / p for p in PROJECT_SOURCES]))
    return ImageSet(f"chaoslog-base:{base}", f"chaoslog-zookeeper:{zk}", f"chaoslog-broker:{broker}")


def _exists(client, tag: str) -> bool:
    import docker.errors
    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def _build_base(client, tag: str) -> None:
    if not shutil.which("mmdebstrap"):
        raise ImageError("mmdebstrap is not installed: run `apt-get install -y mmdebstrap` "
                         "(make setup does this)")
    _say(f"building the Debian {SUITE} root filesystem with mmdebstrap (about a minute)...")
    with tempfile.TemporaryDirectory(prefix="chaoslog-rootfs-") as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        cmd = [
            "mmdebstrap", "--variant=minbase", "--quiet",
            "--include=" + ",".join(BASE_PACKAGES),
            # openjdk's postinst needs this directory.
            "--essential-hook=mkdir -p \"$1/usr/share/man/man1\"",
            "--customize-hook=chroot \"$1\" apt-get clean; rm -rf \"$1\"/var/lib/apt/lists/* "
            "\"$1\"/usr/share/doc/* \"$1\"/usr/share/man/* \"$1\"/usr/share/locale/*",
            SUITE, str(tarball), str(_apt_sources()),
        ]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise ImageError(f"mmdebstrap failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
        _say(f"importing the root filesystem as {tag}")
        repo, version = tag.split(":")
        with open(tarball, "rb") as f:
            client.api.import_image_from_data(
                f, repository=repo, tag=version,
                changes=["ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                         f"LABEL {LABEL}=base"])
    if not _exists(client, tag):
        raise ImageError(f"docker import did not produce {tag}")


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "chaoslog"


def _wheelhouse(ctx: Path) -> None:
    """Wheels of the dependencies (cached on the host by a hash of the pins) and
    of the project, for an offline `pip install --no-index` inside the image."""
    py = sys.executable
    reqs = _project_requirements()
    deps = _cache_dir() / "wheels" / _hash("\n".join(reqs).encode())
    if not (deps / "requirements.txt").exists():
        _say("building the dependency wheelhouse (once per set of pins)")
        tmp = deps.with_name(deps.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        r = subprocess.run([py, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(tmp), *reqs],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise ImageError(f"pip wheel of the dependencies failed:\n{r.stderr[-3000:]}")
        (tmp / "requirements.txt").write_text("\n".join(reqs) + "\n")
        shutil.rmtree(deps, ignore_errors=True)
        tmp.rename(deps)
    shutil.copytree(deps, ctx / "deps")
    with tempfile.TemporaryDirectory(prefix="chaoslog-wheel-") as tmp:
        r = subprocess.run([py, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                            "--wheel-dir", tmp, str(ROOT)], capture_output=True, text=True)
        if r.returncode != 0:
            raise ImageError(f"pip wheel of the project failed:\n{r.stderr[-3000:]}")
        (wheel,) = Path(tmp).glob("chaoslog-*.whl")
        # A pure-Python wheel unpacked is its installed form (PEP 427).
        with zipfile.ZipFile(wheel) as z:
            z.extractall(ctx / "project")


def _docker_build(client, context: Path, tag: str, base: str) -> None:
    dockerfile = (context / "Dockerfile").read_text().replace("@BASE@", base)
    (context / "Dockerfile").write_text(dockerfile)
    try:
        for chunk in client.api.build(path=str(context), tag=tag, rm=True, forcerm=True,
                                      labels={LABEL: tag.split(":")[0]}, decode=True):
            if "error" in chunk:
                raise ImageError(f"docker build of {tag} failed: {chunk['error'].strip()}")
    except ImageError:
        raise
    except Exception as e:  # docker.errors.BuildError / APIError
        raise ImageError(f"docker build of {tag} failed: {e}") from None


def _build_from_dir(client, name: str, tag: str, base: str,
                    prepare: Callable[[Path], None] | None = None) -> None:
    _say(f"building {tag}")
    with tempfile.TemporaryDirectory(prefix=f"chaoslog-{name}-") as tmp:
        ctx = Path(tmp) / "ctx"
        shutil.copytree(IMAGE_DIR / name, ctx)
        if prepare:
            prepare(ctx)
        _docker_build(client, ctx, tag, base)


def ensure_images(force: bool = False) -> ImageSet:
    """Build whatever image is missing for the current inputs; return the tags."""
    client = docker_client()
    tags = _tags()
    t0 = time.monotonic()
    if force or not _exists(client, tags.base):
        _build_base(client, tags.base)
    if force or not _exists(client, tags.zookeeper):
        _build_from_dir(client, "zookeeper", tags.zookeeper, tags.base)
    if force or not _exists(client, tags.broker):
        _build_from_dir(client, "broker", tags.broker, tags.base,
                        prepare=_wheelhouse)
    took = time.monotonic() - t0
    if took > 1:
        _say(f"images ready in {took:.1f}s: {tags.zookeeper}, {tags.broker}")
    return tags


def current_tags() -> ImageSet:
    return _tags()


def prune(keep: ImageSet | None = None) -> list[str]:
    """Remove chaoslog images other than the current ones (old hashes pile up)."""
    client = docker_client()
    keep = keep or _tags()
    keep_set = {keep.base, keep.zookeeper, keep.broker, *_tansu_tags()}
    removed = []
    for img in client.images.list(filters={"label": LABEL}):
        if not any(t in keep_set for t in img.tags):
            try:
                client.images.remove(img.id, force=False)
                removed.extend(img.tags)
            except Exception:
                pass  # still used by a container; next prune gets it
    return removed


# -- tansu: a second Kafka-protocol system, opt-in -------------------------------

TANSU_DIR = IMAGE_DIR / "tansu"
TANSU_BUILD_HINT = "chaoslog images --target tansu"


@dataclass(frozen=True)
class TansuCrate:
    """What images/tansu/crate.toml pins: the crate, its version, its features."""
    name: str
    version: str
    features: tuple[str, ...]

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}"


def tansu_crate() -> TansuCrate:
    import tomllib
    d = tomllib.loads((TANSU_DIR / "crate.toml").read_text())
    return TansuCrate(str(d["crate"]), str(d["version"]), tuple(d.get("features", ())))


# PostgreSQL for tansu: Debian 13's, the first Debian release with 16 or later.
TANSU_PG_SUITE = "trixie"
TANSU_PG_PACKAGES = ("postgresql-17", "iptables")


@dataclass(frozen=True)
class TansuImages:
    tansu: str        # the broker
    postgres: str     # its storage


def tansu_tags() -> TansuImages:
    """The tags of the current inputs. chaoslog-tansu: a hash of the base
    image's tag, crate.toml, the Dockerfile and tansu-node (not the
    toolchain: it is recorded in the image's labels). chaoslog-tansu-postgres:
    a hash of the suite, the packages and images/tansu/postgres/."""
    files = [TANSU_DIR / f for f in ("crate.toml", "Dockerfile", "tansu-node")]
    tansu = _hash(_tags().base.encode(), _tree_bytes(files))
    postgres = _hash(_pg_root_tag().encode(), _tree_bytes([TANSU_DIR / "postgres"]))
    return TansuImages(f"chaoslog-tansu:{tansu}", f"chaoslog-tansu-postgres:{postgres}")


def _pg_root_tag() -> str:
    return f"chaoslog-tansu-pgroot:{_hash(repr((TANSU_PG_SUITE, TANSU_PG_PACKAGES)).encode())}"


def _tansu_tags() -> tuple[str, ...]:
    t = tansu_tags()
    return (t.tansu, t.postgres, _pg_root_tag())


def tansu_image_built() -> bool:
    """Whether both tansu images of the current inputs exist (no build)."""
    client = docker_client()
    t = tansu_tags()
    return _exists(client, t.tansu) and _exists(client, t.postgres)


def _host_mirror() -> str:
    """The Debian mirror the host's apt sources name (deb822 or one-line), so
    that a root filesystem of another suite also names no mirror of its own."""
    text = _apt_sources().read_text()
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["URIs:"] and len(words) > 1:
            return words[1]
        if words[:1] == ["deb"]:
            return next(w for w in words[1:] if "://" in w)
    raise ImageError(f"no Debian mirror found in {_apt_sources()}")


def _build_pg_root(client, tag: str) -> None:
    """A Debian root filesystem of TANSU_PG_SUITE with TANSU_PG_PACKAGES
    (mmdebstrap + docker import, as the base image)."""
    if not shutil.which("mmdebstrap"):
        raise ImageError("mmdebstrap is not installed: run `apt-get install -y mmdebstrap`")
    mirror = _host_mirror()
    _say(f"building a Debian {TANSU_PG_SUITE} root filesystem with "
         f"{', '.join(TANSU_PG_PACKAGES)} (from {mirror})")
    with tempfile.TemporaryDirectory(prefix="chaoslog-pgroot-") as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        cmd = ["mmdebstrap", "--variant=minbase", "--quiet",
               "--include=" + ",".join(TANSU_PG_PACKAGES),
               "--customize-hook=chroot \"$1\" apt-get clean; rm -rf \"$1\"/var/lib/apt/lists/* "
               "\"$1\"/usr/share/doc/* \"$1\"/usr/share/man/* \"$1\"/usr/share/locale/*",
               TANSU_PG_SUITE, str(tarball), f"deb {mirror} {TANSU_PG_SUITE} main"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise ImageError(f"mmdebstrap {TANSU_PG_SUITE} failed (exit {r.returncode}):\n"
                             f"{r.stderr[-3000:]}")
        repo, version = tag.split(":")
        with open(tarball, "rb") as f:
            client.api.import_image_from_data(
                f, repository=repo, tag=version,
                changes=["ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                         f"LABEL {LABEL}=tansu-pgroot"])
    if not _exists(client, tag):
        raise ImageError(f"docker import did not produce {tag}")


def _cargo_toolchain() -> str:
    cargo = shutil.which("cargo")
    if not cargo:
        raise ImageError("cargo is not installed: the tansu image compiles tansu from crates.io "
                         "(install a Rust toolchain, e.g. with rustup, then run "
                         f"`{TANSU_BUILD_HINT}` again)")
    r = subprocess.run([cargo, "--version"], capture_output=True, text=True)
    rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True)
    return f"{r.stdout.strip()}; {rustc.stdout.strip()}"


def _tansu_binary(crate: TansuCrate, toolchain: str) -> Path:
    """The tansu binary of `crate`, compiled once per crate spec and toolchain
    (cached under ~/.cache/chaoslog/tansu/) with the lockfile the crate was
    published with (--locked), at the lowest CPU priority: a build takes many
    minutes and must not slow a chaos run on the same machine."""
    root = _cache_dir() / "tansu"
    key = _hash(repr(crate).encode(), toolchain.encode())
    out = root / f"{crate.name}-{crate.version}-{key}"
    binary = out / "bin" / crate.name
    if binary.exists():
        return binary
    cmd = ["cargo", "install", "--locked", "--root", str(out), "--target-dir", str(root / "target"),
           crate.spec]
    if crate.features:
        cmd += ["--features", ",".join(crate.features)]
    if shutil.which("nice"):
        cmd = ["nice", "-n", "19", *cmd]
    _say(f"compiling {crate.spec} (features: {', '.join(crate.features) or 'default'}) "
         f"with {toolchain}; this takes many minutes")
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0 or not binary.exists():
        raise ImageError(f"cargo install {crate.spec} failed (exit {r.returncode}):\n"
                         f"{r.stderr[-4000:]}")
    _say(f"compiled {binary} in {time.monotonic() - t0:.0f}s")
    return binary


def _tables(sql: str) -> dict[str, set[str]]:
    """table -> column names of the CREATE TABLE statements in `sql`
    (constraint lines are not columns)."""
    import re
    out: dict[str, set[str]] = {}
    sql = re.sub(r"--[^\n]*", "", sql)
    for m in re.finditer(r"create table (?:if not exists )?(\w+)\s*\((.*?)\n\);", sql, re.S | re.I):
        cols = set()
        for line in m.group(2).splitlines():
            word = re.match(r'\s*"?(\w*)', line).group(1).lower()
            if word and word not in ("primary", "unique", "foreign", "constraint", "check"):
                cols.add(word)
        out[m.group(1).lower()] = cols
    return out


def _check_tansu_schema(crate: TansuCrate) -> None:
    """images/tansu/postgres/schema.sql must hold every table and column of the
    schema tansu-storage ships for its SQL engines (src/ddl/*.sql, in the
    crate cargo just downloaded): a new tansu version that adds one fails
    here, by name, rather than with SQL errors in a chaos run."""
    home = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo"))
    ddls = sorted(home.glob(f"registry/src/*/tansu-storage-{crate.version}/src/ddl"))
    if not ddls:
        raise ImageError(f"tansu-storage {crate.version}'s src/ddl is not in {home}/registry/src: "
                         "cannot check images/tansu/postgres/schema.sql against it")
    theirs = _tables("\n".join(p.read_text() for p in sorted(ddls[-1].glob("*.sql"))))
    ours = _tables((TANSU_DIR / "postgres" / "schema.sql").read_text())
    missing = [f"{t}.{c}" for t, cols in sorted(theirs.items())
               for c in sorted(cols - ours.get(t, set()))]
    missing += [t for t in sorted(theirs) if t not in ours]
    if missing:
        raise ImageError(f"images/tansu/postgres/schema.sql lacks what tansu-storage "
                         f"{crate.version} has: {', '.join(missing)}")


def ensure_tansu_image(force: bool = False) -> TansuImages:
    """Build whichever tansu image of the current inputs is missing (the base
    images first if need be); return the tags. `force` builds both again,
    from the cached binary: a compiled crate version does not change."""
    client = docker_client()
    base, tags, pg_root = _tags().base, tansu_tags(), _pg_root_tag()
    t0 = time.monotonic()
    if force or not _exists(client, tags.tansu):
        if not _exists(client, base):
            _build_base(client, base)
        crate = tansu_crate()
        toolchain = _cargo_toolchain()
        binary = _tansu_binary(crate, toolchain)

        def prepare(ctx: Path) -> None:
            shutil.rmtree(ctx / "postgres")
            shutil.copy2(binary, ctx / "tansu")
            with open(ctx / "Dockerfile", "a") as f:
                f.write(f'LABEL org.chaoslog.tansu.crate="{crate.spec}" '
                        f'org.chaoslog.tansu.features="{",".join(crate.features)}" '
                        f'org.chaoslog.tansu.toolchain="{toolchain}"\n')

        _build_from_dir(client, "tansu", tags.tansu, base, prepare=prepare)
    if force or not _exists(client, tags.postgres):
        _check_tansu_schema(tansu_crate())
        if not _exists(client, pg_root):
            _build_pg_root(client, pg_root)
        _say(f"building {tags.postgres}")
        with tempfile.TemporaryDirectory(prefix="chaoslog-tansu-postgres-") as tmp:
            ctx = Path(tmp) / "ctx"
            shutil.copytree(TANSU_DIR / "postgres", ctx)
            _docker_build(client, ctx, tags.postgres, pg_root)
    took = time.monotonic() - t0
    if took > 1:
        _say(f"tansu images ready in {took:.1f}s: {tags.tansu}, {tags.postgres}")
    return tags
