#!/usr/bin/env python3
"""Helper of scripts/image: writes and checks svcplane's OCI image (stdlib only).

    oci_image.py version CARGO_TOML
    oci_image.py ca-bundle CERTS_DIR OUT
    oci_image.py needed --binary FILE --rootfs DIR
    oci_image.py build --rootfs DIR --binary FILE --out DIR --tarball FILE \
        --name NAME --tag TAG --version V --revision SHA --epoch N --arch DEBARCH
    oci_image.py pack --rootfs DIR [--rootfs DIR...] --out DIR --tarball FILE \
        --name NAME --tag TAG --epoch N --arch DEBARCH --entrypoint JSON \
        --what TEXT [--cmd JSON] [--user U] [--workdir D] [--env K=V] [--port P/tcp]
    oci_image.py verify --tarball FILE --workdir DIR --dockerfile FILE \
        --version V [--revision SHA]

`build` is deterministic: sorted tar entries, every mtime at --epoch, owner
0:0 (65532:65532 for /home/nonroot), no pax atime/ctime, gzip with mtime 0 and
no file name, JSON with sorted keys. The same inputs give the same bytes.
`pack` writes the test cluster's small images (tests/node, scripts/node-images)
the same way, from ready-made root filesystems.
`verify` checks an image archive (layout, digests, sizes, diff_ids, the
runtime filesystem and the config against the Dockerfile's final stage) and
leaves the unpacked filesystem in WORKDIR/rootfs for scripts/image to run.
"""

import argparse
import datetime
import gzip
import hashlib
import json
import os
import re
import shlex
import stat
import subprocess
import sys
import tarfile
import tomllib

# ---------------------------------------------------------------------------
# The image recipe (what the Dockerfile's final stage gives; `verify` compares).

# The Dockerfile's runtime base; this script's base layer stands in for it.
EQUIVALENT_BASE = "gcr.io/distroless/cc-debian12"
USER = "65532:65532"
NONROOT_HOME = "home/nonroot"
ENTRYPOINT = ["/svcplane"]
CMD = ["run"]
EXPOSED_PORTS = ["8080/tcp", "9443/tcp", "10257/tcp"]
# What distroless sets (inherited by the Dockerfile's image).
ENV = [
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
]
WORKING_DIR = "/home/nonroot"
LABELS = {
    "org.opencontainers.image.title": "svcplane",
    "org.opencontainers.image.description": (
        "Kubernetes Service-networking control plane: EndpointSlice/Endpoints/"
        "mirroring controllers and a ClusterIP/NodePort admission webhook"
    ),
    "org.opencontainers.image.licenses": "Apache-2.0",
    # plus org.opencontainers.image.version and .revision, set per build
}
REVISION_LABEL = "org.opencontainers.image.revision"
VERSION_LABEL = "org.opencontainers.image.version"

# Debian architecture -> OCI platform (architecture, variant).
ARCHES = {
    "amd64": ("amd64", None),
    "arm64": ("arm64", "v8"),
}

MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
REF_NAME = "org.opencontainers.image.ref.name"
CONTAINERD_NAME = "io.containerd.image.name"

# Anything by these names means a shell or a package manager got in.
FORBIDDEN_NAMES = {
    "sh", "bash", "dash", "ash", "zsh", "busybox",
    "apt", "apt-get", "dpkg", "dpkg-deb",
}


class Failure(Exception):
    pass


def fail(msg):
    raise Failure(msg)


def canonical_json(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------------------
# version, ca-bundle


def cmd_version(args):
    with open(args.cargo_toml, "rb") as f:
        manifest = tomllib.load(f)
    version = manifest.get("workspace", {}).get("package", {}).get("version")
    if not version:
        fail(f"{args.cargo_toml}: no [workspace.package] version")
    print(version)


def cmd_ca_bundle(args):
    certs = []
    for dirpath, dirnames, filenames in os.walk(args.certs_dir):
        dirnames.sort()
        for name in filenames:
            if name.endswith(".crt"):
                full = os.path.join(dirpath, name)
                certs.append((os.path.relpath(full, args.certs_dir).encode(), full))
    certs.sort()
    if not certs:
        fail(f"no .crt files under {args.certs_dir}")
    out = bytearray()
    for _, full in certs:
        with open(full, "rb") as f:
            data = f.read()
        if b"-----BEGIN CERTIFICATE-----" not in data:
            fail(f"{full}: not a PEM certificate")
        out += data if data.endswith(b"\n") else data + b"\n"
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "wb") as f:
        f.write(out)
    os.chmod(args.out, 0o644)
    print(f"{len(certs)} certificates -> {args.out}")


# ---------------------------------------------------------------------------
# needed: every library the binary (and its libraries) needs is in the rootfs


def readelf(flag, path):
    out = subprocess.run(
        ["readelf", flag, "-W", path], check=True, capture_output=True, text=True
    ).stdout
    return out


def elf_needed(path):
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", readelf("-d", path))


def elf_interpreter(path):
    m = re.search(r"Requesting program interpreter: ([^\]]+)\]", readelf("-l", path))
    return m.group(1) if m else None


def resolve_in_root(root, path, depth=0):
    """The host path of `path` as seen inside `root` (symlinks resolved inside it)."""
    if depth > 40:
        fail(f"symlink loop at {path} in {root}")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    current = root
    for i, part in enumerate(parts):
        if part == "..":
            current = os.path.dirname(current) if current != root else root
            continue
        candidate = os.path.join(current, part)
        if os.path.islink(candidate):
            target = os.readlink(candidate)
            rest = "/".join(parts[i + 1:])
            if target.startswith("/"):
                base = target
            else:
                base = os.path.join("/" + os.path.relpath(current, root), target)
            return resolve_in_root(root, base + ("/" + rest if rest else ""), depth + 1)
        current = candidate
    return current


def lib_dirs(root):
    dirs = []
    for base in ("lib", "usr/lib", "lib64", "usr/lib64"):
        full = os.path.join(root, base)
        if os.path.isdir(full):
            for entry in sorted(os.listdir(full)):
                if entry.endswith("-linux-gnu"):
                    dirs.append(f"/{base}/{entry}")
            dirs.append(f"/{base}")
    return dirs


def cmd_needed(args):
    root = os.path.abspath(args.rootfs)
    missing = []
    found = {}
    interp = elf_interpreter(args.binary)
    if interp:
        real = resolve_in_root(root, interp)
        if not os.path.isfile(real):
            missing.append(f"interpreter {interp}")
        else:
            found[interp] = "/" + os.path.relpath(real, root)
    queue = [(args.binary, n) for n in elf_needed(args.binary)]
    seen = set()
    search = lib_dirs(root)
    while queue:
        parent, lib = queue.pop(0)
        if lib in seen:
            continue
        seen.add(lib)
        hit = None
        for d in search:
            real = resolve_in_root(root, f"{d}/{lib}")
            if os.path.isfile(real):
                hit = real
                break
        if hit is None:
            missing.append(f"{lib} (needed by {os.path.basename(parent)})")
            continue
        found[lib] = "/" + os.path.relpath(hit, root)
        queue.extend((hit, n) for n in elf_needed(hit))
    for lib, where in sorted(found.items()):
        print(f"  {lib} => {where}")
    if missing:
        fail("missing from the image's filesystem: " + ", ".join(missing))


# ---------------------------------------------------------------------------
# build


class HashingWriter:
    """A write-only file that hashes and counts what passes through it."""

    def __init__(self, inner):
        self.inner = inner
        self.hash = hashlib.sha256()
        self.size = 0

    def write(self, data):
        self.hash.update(data)
        self.size += len(data)
        return self.inner.write(data)

    def tell(self):
        return self.size

    def flush(self):
        self.inner.flush()


def tar_info(name, st, epoch, owner):
    info = tarfile.TarInfo(name)
    info.mode = stat.S_IMODE(st.st_mode)
    info.mtime = epoch
    info.uid, info.gid = owner
    info.uname = info.gname = ""
    return info


def write_layer(blobs_dir, entries, epoch):
    """entries: sorted (archive name, host path, (uid, gid), mode or None).

    Returns the layer's descriptor and diff_id."""
    tmp = os.path.join(blobs_dir, ".layer.tmp")
    with open(tmp, "wb") as raw:
        compressed = HashingWriter(raw)
        with gzip.GzipFile(filename="", mode="wb", fileobj=compressed, mtime=0,
                           compresslevel=6) as gz:
            plain = HashingWriter(gz)
            with tarfile.open(fileobj=plain, mode="w", format=tarfile.PAX_FORMAT) as tar:
                hardlinks = {}
                for name, path, owner, mode in entries:
                    st = os.lstat(path)
                    info = tar_info(name, st, epoch, owner)
                    if mode is not None:
                        info.mode = mode
                    if stat.S_ISDIR(st.st_mode):
                        info.type = tarfile.DIRTYPE
                        tar.addfile(info)
                    elif stat.S_ISLNK(st.st_mode):
                        info.type = tarfile.SYMTYPE
                        info.linkname = os.readlink(path)
                        info.mode = 0o777
                        tar.addfile(info)
                    elif stat.S_ISREG(st.st_mode):
                        key = (st.st_dev, st.st_ino)
                        if st.st_nlink > 1 and key in hardlinks:
                            info.type = tarfile.LNKTYPE
                            info.linkname = hardlinks[key]
                            tar.addfile(info)
                            continue
                        hardlinks[key] = name
                        info.type = tarfile.REGTYPE
                        info.size = st.st_size
                        with open(path, "rb") as f:
                            tar.addfile(info, f)
                    else:
                        fail(f"{path}: unsupported file type in the image")
            diff_id = "sha256:" + plain.hash.hexdigest()
    digest = compressed.hash.hexdigest()
    os.replace(tmp, os.path.join(blobs_dir, digest))
    return {"mediaType": MT_LAYER, "digest": "sha256:" + digest,
            "size": compressed.size}, diff_id


def rootfs_entries(root, owners):
    entries = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, root)
        names = sorted(dirnames + filenames)
        for name in names:
            full = os.path.join(dirpath, name)
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            entries.append((rel, full, owners.get(rel, (0, 0)), None))
        # os.walk does not descend into symlinked directories (followlinks=False)
    entries.sort(key=lambda e: e[0].encode())
    return entries


def write_blob(blobs_dir, data, media_type):
    digest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(blobs_dir, digest), "wb") as f:
        f.write(data)
    return {"mediaType": media_type, "digest": "sha256:" + digest, "size": len(data)}


def rfc3339(epoch):
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


def image_config(arch, variant, created, version, revision, diff_ids, history):
    labels = dict(LABELS)
    labels[VERSION_LABEL] = version
    labels[REVISION_LABEL] = revision
    config = {
        "created": created,
        "architecture": arch,
        "os": "linux",
        "config": {
            "User": USER,
            "Env": ENV,
            "Entrypoint": ENTRYPOINT,
            "Cmd": CMD,
            "WorkingDir": WORKING_DIR,
            "ExposedPorts": {p: {} for p in EXPOSED_PORTS},
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": history,
    }
    if variant:
        config["variant"] = variant
    return config


def write_archive(layout, tarball, epoch):
    """The layout directory as one tar (oci-layout, index.json, then blobs)."""
    names = ["oci-layout", "index.json", "blobs", "blobs/sha256"]
    names += ["blobs/sha256/" + b for b in sorted(os.listdir(os.path.join(layout, "blobs", "sha256")))]
    tmp = tarball + ".tmp"
    with open(tmp, "wb") as raw, tarfile.open(fileobj=raw, mode="w",
                                              format=tarfile.PAX_FORMAT) as tar:
        for name in names:
            path = os.path.join(layout, name)
            st = os.lstat(path)
            info = tar_info(name, st, epoch, (0, 0))
            if stat.S_ISDIR(st.st_mode):
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.mode, info.size = 0o644, st.st_size
                with open(path, "rb") as f:
                    tar.addfile(info, f)
    os.replace(tmp, tarball)


def cmd_build(args):
    if args.arch not in ARCHES:
        fail(f"unsupported architecture {args.arch} (known: {', '.join(ARCHES)})")
    arch, variant = ARCHES[args.arch]
    created = rfc3339(args.epoch)
    layout = args.out
    blobs = os.path.join(layout, "blobs", "sha256")
    os.makedirs(blobs)

    base_entries = rootfs_entries(args.rootfs, {NONROOT_HOME: (65532, 65532)})
    base, base_diff = write_layer(blobs, base_entries, args.epoch)
    binary = os.path.realpath(args.binary)
    app, app_diff = write_layer(blobs, [("svcplane", binary, (0, 0), 0o755)], args.epoch)

    history = [
        {"created": created, "created_by": "scripts/image: Debian packages "
         + " ".join(args.packages), "comment": "base (like " + EQUIVALENT_BASE + ":nonroot)"},
        {"created": created, "created_by": "scripts/image: cargo build --release --locked "
         "-p svcplane-controller; /svcplane"},
    ]
    config = image_config(arch, variant, created, args.version, args.revision,
                          [base_diff, app_diff], history)
    manifest_desc, config_desc = write_image(layout, args.tarball, config, [base, app],
                                             args.name, args.tag, args.epoch)
    print(f"manifest digest: {manifest_desc['digest']}")
    print(f"config digest:   {config_desc['digest']}")
    print(f"layers:          {base['digest']} ({base['size']} B, base)")
    print(f"                 {app['digest']} ({app['size']} B, /svcplane)")


def write_image(layout, tarball, config, layers, name, tag, epoch):
    """Config, manifest, index and oci-layout into `layout` (whose blobs/sha256
    already holds the layers), then the archive. Returns the manifest's and the
    config's descriptors."""
    blobs = os.path.join(layout, "blobs", "sha256")
    created = config["created"]
    config_desc = write_blob(blobs, canonical_json(config), MT_CONFIG)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MT_MANIFEST,
        "config": config_desc,
        "layers": layers,
        "annotations": {"org.opencontainers.image.created": created},
    }
    manifest_desc = write_blob(blobs, canonical_json(manifest), MT_MANIFEST)
    platform = {"architecture": config["architecture"], "os": "linux"}
    if config.get("variant"):
        platform["variant"] = config["variant"]
    manifest_desc["platform"] = platform
    # containerd names an imported image after this annotation (`ctr images
    # import`); without it the image is stored unnamed and Pods cannot use it.
    manifest_desc["annotations"] = {
        REF_NAME: tag,
        CONTAINERD_NAME: f"{name}:{tag}",
    }
    index = {"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": [manifest_desc]}
    with open(os.path.join(layout, "index.json"), "wb") as f:
        f.write(canonical_json(index))
    with open(os.path.join(layout, "oci-layout"), "wb") as f:
        f.write(canonical_json({"imageLayoutVersion": "1.0.0"}))
    write_archive(layout, tarball, epoch)
    return manifest_desc, config_desc


def cmd_pack(args):
    """A small image for the test cluster (pause, CoreDNS, busybox): one layer per
    --rootfs directory, the runtime settings from the flags, no svcplane labels."""
    if args.arch not in ARCHES:
        fail(f"unsupported architecture {args.arch} (known: {', '.join(ARCHES)})")
    arch, variant = ARCHES[args.arch]
    created = rfc3339(args.epoch)
    blobs = os.path.join(args.out, "blobs", "sha256")
    os.makedirs(blobs)
    layers, diff_ids, history = [], [], []
    for rootfs in args.rootfs:
        desc, diff_id = write_layer(blobs, rootfs_entries(rootfs, {}), args.epoch)
        layers.append(desc)
        diff_ids.append(diff_id)
        history.append({"created": created, "created_by": f"scripts/oci_image.py pack: {args.what}"})
    runtime = {
        "Env": args.env or ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
        "Entrypoint": json.loads(args.entrypoint),
    }
    if args.cmd:
        runtime["Cmd"] = json.loads(args.cmd)
    if args.user:
        runtime["User"] = args.user
    if args.workdir:
        runtime["WorkingDir"] = args.workdir
    if args.port:
        runtime["ExposedPorts"] = {p: {} for p in args.port}
    config = {
        "created": created,
        "architecture": arch,
        "os": "linux",
        "config": runtime,
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": history,
    }
    if variant:
        config["variant"] = variant
    manifest_desc, _ = write_image(args.out, args.tarball, config, layers, args.name,
                                   args.tag, args.epoch)
    print(f"{args.name}:{args.tag} {manifest_desc['digest']} -> {args.tarball}")


# ---------------------------------------------------------------------------
# verify


def safe_name(name):
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if name.startswith("/") or ".." in parts:
        fail(f"unsafe path in archive: {name!r}")
    return "/".join(parts)


def ensure_parent(root, rel):
    """Create (or check) the parent directories of rel, refusing symlinks on the way."""
    current = root
    for part in rel.split("/")[:-1]:
        current = os.path.join(current, part)
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            os.mkdir(current, 0o755)
            continue
        if not stat.S_ISDIR(st.st_mode):
            fail(f"{rel}: a parent is not a directory inside the image")


def remove_path(path):
    if os.path.isdir(path) and not os.path.islink(path):
        for entry in os.listdir(path):
            remove_path(os.path.join(path, entry))
        os.rmdir(path)
    elif os.path.lexists(path):
        os.unlink(path)


def unpack_outer(tarball, dest):
    with tarfile.open(tarball, "r:") as tar:
        for m in tar:
            rel = safe_name(m.name)
            if not rel:
                continue
            path = os.path.join(dest, rel)
            ensure_parent(dest, rel)
            if m.isdir():
                os.makedirs(path, exist_ok=True)
            elif m.isfile():
                copy_member(tar, m, path)
            else:
                fail(f"unexpected entry type in the image archive: {m.name}")


def copy_member(tar, member, path):
    """Write a regular file of a streamed tar to path, a MiB at a time."""
    with tar.extractfile(member) as src, open(path, "wb") as out:
        while chunk := src.read(1 << 20):
            out.write(chunk)


def apply_layer(blob, root, inventory):
    """Unpack one gzip layer over root (OCI whiteouts honoured); returns the diff_id."""
    with open(blob, "rb") as raw, gzip.GzipFile(fileobj=raw, mode="rb") as gz:
        plain = HashingReader(gz)
        with tarfile.open(fileobj=plain, mode="r|") as tar:
            for m in tar:
                rel = safe_name(m.name)
                if not rel:
                    continue
                base = os.path.basename(rel)
                parent = os.path.dirname(rel)
                if base == ".wh..wh..opq":
                    target = os.path.join(root, parent)
                    for entry in os.listdir(target):
                        remove_path(os.path.join(target, entry))
                    continue
                if base.startswith(".wh."):
                    remove_path(os.path.join(root, parent, base[4:]))
                    continue
                ensure_parent(root, rel)
                path = os.path.join(root, rel)
                existing = os.path.lexists(path)
                if existing and not (m.isdir() and os.path.isdir(path)
                                     and not os.path.islink(path)):
                    remove_path(path)
                if m.isdir():
                    os.makedirs(path, exist_ok=True)
                elif m.isfile():
                    copy_member(tar, m, path)
                elif m.issym():
                    os.symlink(m.linkname, path)
                elif m.islnk():
                    os.link(os.path.join(root, safe_name(m.linkname)), path)
                else:
                    fail(f"unsupported layer entry type: {m.name}")
                if not m.issym():
                    os.chown(path, m.uid, m.gid)
                    os.chmod(path, m.mode)
                else:
                    os.lchown(path, m.uid, m.gid)
                inventory[rel] = m
        # drain the end-of-archive padding so the hash covers the whole tar
        while plain.read(1 << 20):
            pass
    return "sha256:" + plain.hash.hexdigest()


class HashingReader:
    def __init__(self, inner):
        self.inner = inner
        self.hash = hashlib.sha256()

    def read(self, n=-1):
        data = self.inner.read(n)
        self.hash.update(data)
        return data


def load_json(layout, desc, expected_type):
    if desc.get("mediaType") != expected_type:
        fail(f"{desc.get('digest')}: media type {desc.get('mediaType')!r}, "
             f"expected {expected_type}")
    with open(blob_path(layout, desc), "rb") as f:
        return json.loads(f.read())


def blob_path(layout, desc):
    digest = desc.get("digest", "")
    algo, _, hexdigest = digest.partition(":")
    if algo != "sha256" or not re.fullmatch(r"[0-9a-f]{64}", hexdigest):
        fail(f"bad digest {digest!r}")
    path = os.path.join(layout, "blobs", "sha256", hexdigest)
    if not os.path.isfile(path):
        fail(f"blob {digest} is referenced but missing")
    size = os.path.getsize(path)
    if size != desc.get("size"):
        fail(f"blob {digest}: size {size}, descriptor says {desc.get('size')}")
    return path


def dockerfile_final_stage(path):
    """Instructions of the Dockerfile's last stage as (KEYWORD, rest) pairs."""
    with open(path) as f:
        lines = f.read().splitlines()
    instructions = []
    pending = ""
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#") or (not stripped and pending):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        if full:
            keyword, _, rest = full.partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
    stages = [i for i, (k, _) in enumerate(instructions) if k == "FROM"]
    if not stages:
        fail(f"{path}: no FROM")
    return instructions[stages[-1]:]


def dockerfile_expectations(path):
    stage = dockerfile_final_stage(path)
    want = {"labels": {}, "ports": set(), "user": None, "entrypoint": None,
            "cmd": None, "base": None, "copies_binary": False}
    for keyword, rest in stage:
        if keyword == "FROM":
            image = [w for w in rest.split() if not w.startswith("--")][0]
            want["base"] = image
        elif keyword == "USER":
            want["user"] = rest
        elif keyword in ("ENTRYPOINT", "CMD"):
            try:
                value = json.loads(rest)
            except json.JSONDecodeError:
                fail(f"Dockerfile {keyword} is not in exec (JSON) form: {rest}")
            want[keyword.lower()] = value
        elif keyword == "EXPOSE":
            for port in rest.split():
                want["ports"].add(port if "/" in port else port + "/tcp")
        elif keyword == "LABEL":
            for token in shlex.split(rest):
                key, sep, value = token.partition("=")
                if not sep:
                    fail(f"Dockerfile LABEL not in key=value form: {rest}")
                want["labels"][key] = value
        elif keyword == "COPY":
            words = rest.split()
            if words and words[-1] == ENTRYPOINT[0]:
                want["copies_binary"] = True
    return want


def compare_with_dockerfile(config, dockerfile, version, revision):
    want = dockerfile_expectations(dockerfile)
    got = config.get("config", {})
    diffs = []
    base = want["base"] or ""
    if base.split("@")[0].split(":")[0] != EQUIVALENT_BASE or ":nonroot" not in base:
        diffs.append(f"final stage FROM {base}, this recipe stands in for "
                     f"{EQUIVALENT_BASE}:nonroot")
    if not want["copies_binary"]:
        diffs.append(f"final stage does not COPY the binary to {ENTRYPOINT[0]}")
    if got.get("User") != want["user"]:
        diffs.append(f"USER: Dockerfile {want['user']!r}, image {got.get('User')!r}")
    if got.get("Entrypoint") != want["entrypoint"]:
        diffs.append(f"ENTRYPOINT: Dockerfile {want['entrypoint']}, image {got.get('Entrypoint')}")
    if got.get("Cmd") != want["cmd"]:
        diffs.append(f"CMD: Dockerfile {want['cmd']}, image {got.get('Cmd')}")
    ports = set(got.get("ExposedPorts", {}))
    if ports != want["ports"]:
        diffs.append(f"EXPOSE: Dockerfile {sorted(want['ports'])}, image {sorted(ports)}")
    labels = got.get("Labels", {})
    only_docker = sorted(set(want["labels"]) - set(labels))
    only_image = sorted(set(labels) - set(want["labels"]))
    if only_docker:
        diffs.append(f"LABEL keys only in the Dockerfile: {only_docker}")
    if only_image:
        diffs.append(f"LABEL keys only in the image: {only_image}")
    for key, value in sorted(want["labels"].items()):
        if key not in labels:
            continue
        if key == REVISION_LABEL:
            if "${SVCPLANE_GIT_COMMIT}" not in value:
                diffs.append(f"LABEL {key}: Dockerfile {value!r} is not the commit argument")
            if not re.fullmatch(r"[0-9a-f]{40}", labels[key]):
                diffs.append(f"LABEL {key}: image {labels[key]!r} is not a commit")
            elif revision and labels[key] != revision:
                diffs.append(f"LABEL {key}: image {labels[key]}, checkout HEAD {revision}")
        elif labels[key] != value:
            diffs.append(f"LABEL {key}: Dockerfile {value!r}, image {labels[key]!r}")
    if labels.get(VERSION_LABEL) != version:
        diffs.append(f"LABEL {VERSION_LABEL}: image {labels.get(VERSION_LABEL)!r}, "
                     f"Cargo.toml {version!r}")
    if diffs:
        fail("the image and the Dockerfile's final stage differ:\n  - " + "\n  - ".join(diffs))
    print(f"  matches {dockerfile}: USER {want['user']}, ENTRYPOINT {want['entrypoint']}, "
          f"CMD {want['cmd']}, EXPOSE {' '.join(sorted(want['ports']))}, "
          f"{len(want['labels'])} labels")


def check_rootfs(root, inventory):
    problems = []
    for rel, m in sorted(inventory.items()):
        if not m.isdir() and os.path.basename(rel) in FORBIDDEN_NAMES:
            problems.append(f"/{rel} (shell or package manager)")
    for shell in ("bin/sh", "usr/bin/sh", "bin/bash", "usr/bin/bash", "bin/dash",
                  "usr/bin/dash"):
        if os.path.lexists(os.path.join(root, shell)):
            problems.append(f"/{shell} exists")

    def expect(rel, kind, mode, owner):
        m = inventory.get(rel)
        if m is None:
            problems.append(f"/{rel} missing")
            return
        if kind == "dir" and not m.isdir() or kind == "file" and not m.isfile():
            problems.append(f"/{rel} is not a {kind}")
        if mode is not None and m.mode != mode:
            problems.append(f"/{rel} mode {m.mode:o}, expected {mode:o}")
        if (m.uid, m.gid) != owner:
            problems.append(f"/{rel} owner {m.uid}:{m.gid}, expected {owner[0]}:{owner[1]}")

    expect("tmp", "dir", 0o1777, (0, 0))
    expect(NONROOT_HOME, "dir", None, (65532, 65532))
    expect("svcplane", "file", 0o755, (0, 0))
    expect("etc/passwd", "file", 0o644, (0, 0))
    expect("etc/group", "file", 0o644, (0, 0))
    expect("etc/ssl/certs/ca-certificates.crt", "file", 0o644, (0, 0))
    for rel, m in inventory.items():
        if rel != NONROOT_HOME and (m.uid, m.gid) != (0, 0):
            problems.append(f"/{rel} owned by {m.uid}:{m.gid}, not root")
    try:
        with open(os.path.join(root, "etc/passwd")) as f:
            passwd = [line.split(":") for line in f.read().splitlines()]
        users = {p[0]: p for p in passwd if len(p) == 7}
        if users.get("root", [None] * 7)[2:4] != ["0", "0"]:
            problems.append("/etc/passwd: no root 0:0")
        nonroot = users.get("nonroot")
        if not nonroot or nonroot[2:4] != ["65532", "65532"] or nonroot[5] != "/home/nonroot":
            problems.append("/etc/passwd: no nonroot 65532:65532 with home /home/nonroot")
        with open(os.path.join(root, "etc/group")) as f:
            groups = {g.split(":")[0]: g.split(":") for g in f.read().splitlines()}
        if groups.get("nonroot", [None] * 3)[2] != "65532" or groups.get("root", [None] * 3)[2] != "0":
            problems.append("/etc/group: no root 0 and nonroot 65532")
        with open(os.path.join(root, "etc/ssl/certs/ca-certificates.crt"), "rb") as f:
            certs = f.read().count(b"-----BEGIN CERTIFICATE-----")
        if certs < 100:
            problems.append(f"CA bundle holds {certs} certificates, expected 100 or more")
    except (OSError, IndexError) as e:
        problems.append(f"reading the image's /etc: {e}")
        certs = 0
    if problems:
        fail("the image's filesystem:\n  - " + "\n  - ".join(problems))
    print(f"  filesystem: {len(inventory)} entries, no shell or package manager, "
          f"/tmp 1777, /home/nonroot 65532:65532, {certs} CA certificates")


def cmd_verify(args):
    work = args.workdir
    layout = os.path.join(work, "layout")
    root = os.path.join(work, "rootfs")
    os.makedirs(layout)
    os.makedirs(root)
    os.chmod(root, 0o755)
    unpack_outer(args.tarball, layout)

    with open(os.path.join(layout, "oci-layout"), "rb") as f:
        if json.loads(f.read()).get("imageLayoutVersion") != "1.0.0":
            fail("oci-layout: imageLayoutVersion is not 1.0.0")
    with open(os.path.join(layout, "index.json"), "rb") as f:
        index = json.loads(f.read())
    if index.get("schemaVersion") != 2:
        fail("index.json: schemaVersion is not 2")
    manifests = index.get("manifests", [])
    if len(manifests) != 1:
        fail(f"index.json: {len(manifests)} manifests, expected one")
    mdesc = manifests[0]
    notes = mdesc.get("annotations", {})
    name = notes.get(CONTAINERD_NAME, "")
    tag = notes.get(REF_NAME, "")
    if not tag or not name.endswith(":" + tag):
        fail(f"index.json: annotations {REF_NAME}={tag!r} and {CONTAINERD_NAME}={name!r} "
             "must be set and agree")

    # every blob is named by its content
    referenced = set()
    blobs_dir = os.path.join(layout, "blobs", "sha256")
    for blob in sorted(os.listdir(blobs_dir)):
        if sha256_file(os.path.join(blobs_dir, blob)) != blob:
            fail(f"blob sha256:{blob}: content does not match its name")

    manifest = load_json(layout, mdesc, MT_MANIFEST)
    referenced.add(mdesc["digest"])
    if manifest.get("schemaVersion") != 2 or manifest.get("mediaType") != MT_MANIFEST:
        fail("manifest: schemaVersion/mediaType")
    config = load_json(layout, manifest.get("config", {}), MT_CONFIG)
    referenced.add(manifest["config"]["digest"])
    platform = mdesc.get("platform", {})
    for key in ("architecture", "os", "variant"):
        if platform.get(key) != config.get(key):
            fail(f"index platform {key} {platform.get(key)!r} != config {config.get(key)!r}")
    layers = manifest.get("layers", [])
    diff_ids = config.get("rootfs", {}).get("diff_ids", [])
    if len(layers) != len(diff_ids) or not layers:
        fail(f"{len(layers)} layers but {len(diff_ids)} diff_ids")
    inventory = {}
    for layer, diff_id in zip(layers, diff_ids):
        if layer.get("mediaType") != MT_LAYER:
            fail(f"layer {layer.get('digest')}: media type {layer.get('mediaType')}")
        referenced.add(layer["digest"])
        got = apply_layer(blob_path(layout, layer), root, inventory)
        if got != diff_id:
            fail(f"layer {layer['digest']}: uncompressed {got}, config diff_id {diff_id}")
    unreferenced = {"sha256:" + b for b in os.listdir(blobs_dir)} - referenced
    if unreferenced:
        fail(f"blobs nobody references: {sorted(unreferenced)}")
    print(f"  layout: index -> manifest {mdesc['digest']} -> config, {len(layers)} layers, "
          "digests, sizes and diff_ids match")
    check_rootfs(root, inventory)
    compare_with_dockerfile(config, args.dockerfile, args.version, args.revision)

    cfg = config["config"]
    with open(os.path.join(work, "image.env"), "w") as f:
        f.write(f"IMAGE_NAME={shlex.quote(name.rsplit(':', 1)[0])}\n")
        f.write(f"IMAGE_TAG={shlex.quote(tag)}\n")
        f.write(f"IMAGE_DIGEST={shlex.quote(mdesc['digest'])}\n")
        f.write(f"IMAGE_USER={shlex.quote(cfg['User'])}\n")
        f.write(f"IMAGE_ENTRYPOINT={shlex.quote(cfg['Entrypoint'][0])}\n")
        f.write(f"IMAGE_ROOTFS={shlex.quote(root)}\n")


# ---------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("version")
    p.add_argument("cargo_toml")
    p.set_defaults(run=cmd_version)
    p = sub.add_parser("ca-bundle")
    p.add_argument("certs_dir")
    p.add_argument("out")
    p.set_defaults(run=cmd_ca_bundle)
    p = sub.add_parser("needed")
    p.add_argument("--binary", required=True)
    p.add_argument("--rootfs", required=True)
    p.set_defaults(run=cmd_needed)
    p = sub.add_parser("build")
    for opt in ("rootfs", "binary", "out", "tarball", "name", "tag", "version",
                "revision", "arch"):
        p.add_argument("--" + opt, required=True)
    p.add_argument("--epoch", required=True, type=int)
    p.add_argument("--packages", nargs="*", default=[])
    p.set_defaults(run=cmd_build)
    p = sub.add_parser("pack")
    for opt in ("out", "tarball", "name", "tag", "arch", "entrypoint", "what"):
        p.add_argument("--" + opt, required=True)
    p.add_argument("--epoch", required=True, type=int)
    p.add_argument("--rootfs", required=True, action="append")
    p.add_argument("--cmd", default="")
    p.add_argument("--user", default="")
    p.add_argument("--workdir", default="")
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--port", action="append", default=[])
    p.set_defaults(run=cmd_pack)
    p = sub.add_parser("verify")
    for opt in ("tarball", "workdir", "dockerfile", "version"):
        p.add_argument("--" + opt, required=True)
    p.add_argument("--revision", default="")
    p.set_defaults(run=cmd_verify)
    args = parser.parse_args()
    try:
        args.run(args)
    except Failure as e:
        print(f"oci_image.py {args.command}: FAILED: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
