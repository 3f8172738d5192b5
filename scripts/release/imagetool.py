#!/usr/bin/env python3
"""The deterministic parts of scripts/release.sh (docs/release.md), with the standard library only.

  debroot  --out DIR --cache DIR --record FILE PACKAGE...
      Fetches Debian packages (apt-get download, checked against the SHA-256 of apt's index),
      keeps the files the runner needs from them (PACKAGE is NAME=GLOB,!GLOB,...), and adds the shared libraries those files
      need, each from its own Debian package, until nothing is missing. Records every package
      taken with its version in FILE (JSON).
  image    --out ARCHIVE --epoch SECONDS --ref NAME --config FILE --layer DESCRIPTION=DIR...
      Writes an OCI image layout as one tar (what `skopeo copy oci-archive:` and
      `umoci unpack` read): one gzip layer per DIR, entries sorted, owned by 0:0 unless
      `--owner PATH=UID:GID` says otherwise, every time set to SECONDS, gzip headers without a
      time or a name. Prints {"digest", "size", "layers": [...]} as JSON.
  sbom     --out FILE --epoch SECONDS --repository R --version V --digest D [--binary ...]
           [--cargo-tree FILE] [--go-binary ...] [--debs FILE]
      A CycloneDX 1.5 JSON SBOM of one image: its binaries (with their SHA-256), the Rust crates
      compiled into CAPTF's (cargo tree), the Go modules of OpenTofu (go version -m) and the
      Debian packages (with their versions and the SHA-256 of each .deb).
  retar    --epoch SECONDS IN.tgz OUT.tgz
      Rewrites a gzip tar (the chart helm packaged) with every time set to SECONDS and owners
      0:0, entries in their order, gzip header without a time.
  pin --values VALUES --images IMAGES_TXT --tag VERSION [--check] [FILE...]
      Points the chart's defaults (`<component>.image.repository`, `tag`, `digest` in values.yaml,
      rewritten line by line so its comments stay) and every reference to the images they named
      in FILE at the release's images; --check writes nothing and fails if anything would change.
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import uuid

ARCH = "amd64"
LIB_DIRS = ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib64", "lib", "usr/lib")


def die(message):
    print(f"imagetool: {message}", file=sys.stderr)
    sys.exit(1)


def run(args, **kw):
    p = subprocess.run(args, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        die(f"{' '.join(args)} failed ({p.returncode}): {p.stderr.strip() or p.stdout.strip()}")
    return p.stdout


# ---------------------------------------------------------------------------------------------
# debroot


def apt_candidate(package):
    """The candidate version of a package in apt's index: (version, sha256, arch)."""
    p = subprocess.run(
        ["apt-cache", "show", "--no-all-versions", package], capture_output=True, text=True
    )
    if p.returncode != 0 or not p.stdout.strip():
        die(
            f"apt has no package {package!r} (run `apt-get update` first, on a Debian 12 host): "
            f"{p.stderr.strip()}"
        )
    fields = {}
    for line in p.stdout.splitlines():
        if ":" in line and not line.startswith(" "):
            k, v = line.split(":", 1)
            fields.setdefault(k, v.strip())
    return fields["Version"], fields["SHA256"], fields.get("Architecture", ARCH)


class Debs:
    """Debian packages fetched into a cache (by the SHA-256 apt's index gives) and extracted."""

    def __init__(self, cache):
        self.cache = cache
        os.makedirs(os.path.join(cache, "debs"), exist_ok=True)
        os.makedirs(os.path.join(cache, "x"), exist_ok=True)
        self.taken = {}  # name -> {"version", "sha256", "arch", "root", "why"}

    def take(self, name, why):
        if name in self.taken:
            return self.taken[name]
        version, sha256, arch = apt_candidate(name)
        deb = os.path.join(self.cache, "debs", f"{sha256}.deb")
        if not os.path.exists(deb):
            with tempfile.TemporaryDirectory(dir=self.cache) as tmp:
                p = subprocess.run(
                    ["apt-get", "download", "-q", f"{name}={version}"],
                    cwd=tmp,
                    capture_output=True,
                    text=True,
                )
                files = os.listdir(tmp)
                if p.returncode != 0 or len(files) != 1:
                    die(f"apt-get download {name}={version} failed: {p.stderr.strip()}")
                got = os.path.join(tmp, files[0])
                if sha256_file(got) != sha256:
                    die(f"{files[0]} does not match the SHA-256 of apt's index ({sha256})")
                os.replace(got, deb)
        root = os.path.join(self.cache, "x", sha256)
        if not os.path.isdir(root):
            part = root + ".partial"
            shutil.rmtree(part, ignore_errors=True)
            run(["dpkg-deb", "-x", deb, part])
            os.replace(part, root)
        entry = {"version": version, "sha256": sha256, "arch": arch, "root": root, "why": why}
        self.taken[name] = entry
        return entry


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def is_elf(path):
    if os.path.islink(path) or not os.path.isfile(path):
        return False
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def elf_needs(path):
    """(interpreter or None, [NEEDED sonames]) of an ELF file, from readelf."""
    out = run(["readelf", "-d", "-l", "-W", path])
    interp = None
    m = re.search(r"\[Requesting program interpreter: ([^\]]+)\]", out)
    if m:
        interp = m.group(1)
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    return interp, needed


def owner_of(path):
    """The installed Debian package that holds an absolute path (dpkg -S), or None."""
    p = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
    if p.returncode != 0:
        return None
    for line in p.stdout.splitlines():
        pkg, _, where = line.partition(": ")
        if where.strip() == path and "diversion" not in pkg:
            return pkg.split(":")[0].split(",")[0].strip()
    return None


def debroot(args):
    debs = Debs(args.cache)
    out = args.out
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    keep = {}  # package -> [globs relative to its root]
    for spec in args.package:
        name, _, globs = spec.partition("=")
        keep[name] = [g for g in globs.split(",") if g]
    copied = set()

    def copy(pkg_root, rel):
        """Copies one path (and what a symlink points to inside the package) into out."""
        if rel in copied:
            return
        src = os.path.join(pkg_root, rel)
        if not os.path.lexists(src):
            die(f"{rel} is not in {pkg_root}")
        copied.add(rel)
        dst = os.path.join(out, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.islink(src):
            target = os.readlink(src)
            os.symlink(target, dst)
            resolved = os.path.normpath(
                os.path.join(os.path.dirname("/" + rel), target) if not target.startswith("/") else target
            ).lstrip("/")
            if os.path.lexists(os.path.join(pkg_root, resolved)):
                copy(pkg_root, resolved)
        elif os.path.isdir(src):
            os.makedirs(dst, exist_ok=True)
        else:
            shutil.copy2(src, dst)

    import fnmatch

    for name, globs in keep.items():
        entry = debs.take(name, "requested")
        root = entry["root"]
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for f in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]):
                rel = os.path.relpath(os.path.join(dirpath, f), root)
                if any(fnmatch.fnmatchcase(rel, g) for g in globs if not g.startswith("!")) and not any(
                    fnmatch.fnmatchcase(rel, g[1:]) for g in globs if g.startswith("!")
                ):
                    copy(root, rel)
        copyright_file = f"usr/share/doc/{name}/copyright"
        if os.path.exists(os.path.join(root, copyright_file)):
            copy(root, copyright_file)

    # Shared libraries: every NEEDED of every ELF file kept, from the package that holds it on
    # this (Debian 12) host, fetched at apt's candidate version; until nothing is missing.
    def provided(soname):
        return any(os.path.lexists(os.path.join(out, d, soname)) for d in LIB_DIRS)

    seen_elf = set()
    while True:
        missing = []
        for dirpath, _, filenames in os.walk(out):
            for f in filenames:
                p = os.path.join(dirpath, f)
                if p in seen_elf or not is_elf(p):
                    continue
                seen_elf.add(p)
                interp, needed = elf_needs(p)
                if interp and not os.path.lexists(os.path.join(out, interp.lstrip("/"))):
                    missing.append(("interp", interp, p))
                for soname in needed:
                    if not provided(soname):
                        missing.append(("lib", soname, p))
        if not missing:
            break
        progressed = False
        for kind, what, needed_by in missing:
            if kind == "interp":
                paths = [what]
            elif provided(what):
                continue
            else:
                paths = [f"/{d}/{what}" for d in LIB_DIRS[:2]]
            for path in paths:
                pkg = owner_of(path)
                if pkg is None and os.path.islink(path):
                    pkg = owner_of(os.path.realpath(path))
                if pkg is None:
                    continue
                entry = debs.take(pkg, f"library of {os.path.relpath(needed_by, out)}")
                rel = path.lstrip("/")
                if not os.path.lexists(os.path.join(entry["root"], rel)):
                    continue
                copy(entry["root"], rel)
                copyright_file = f"usr/share/doc/{pkg}/copyright"
                if os.path.exists(os.path.join(entry["root"], copyright_file)):
                    copy(entry["root"], copyright_file)
                progressed = True
                break
            else:
                die(
                    f"{what} (needed by {os.path.relpath(needed_by, out)}) is in no installed Debian "
                    f"package on this host: install the package that holds it"
                )
        if not progressed:
            break

    record = [
        {"name": n, "version": e["version"], "arch": e["arch"], "sha256": e["sha256"], "why": e["why"]}
        for n, e in sorted(debs.taken.items())
    ]
    with open(args.record, "w") as f:
        json.dump(record, f, indent=2, sort_keys=True)
        f.write("\n")


# ---------------------------------------------------------------------------------------------
# image


class HashingWriter:
    """A file object that writes through and hashes what passes."""

    def __init__(self, inner):
        self.inner = inner
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, b):
        self.sha.update(b)
        self.size += len(b)
        return self.inner.write(b)

    def flush(self):
        self.inner.flush()


def layer_entries(root, owners):
    """Every path under root, sorted by its path in the image, as (name, full path)."""
    entries = []
    for dirpath, dirnames, filenames in os.walk(root):
        for d in list(dirnames):
            if os.path.islink(os.path.join(dirpath, d)):
                dirnames.remove(d)
                filenames.append(d)
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            entries.append((os.path.relpath(full, root), full))
    entries.sort(key=lambda e: e[0])
    return entries


def write_layer(root, epoch, owners, modes, out_path):
    """One layer: a tar of root, gzip'd. Returns (digest, size, diff_id)."""
    with open(out_path, "wb") as raw:
        compressed = HashingWriter(raw)
        with gzip.GzipFile(filename="", mode="wb", fileobj=compressed, compresslevel=9, mtime=0) as gz:
            uncompressed = HashingWriter(gz)
            with tarfile.open(fileobj=uncompressed, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                links = {}
                for name, full in layer_entries(root, owners):
                    st = os.lstat(full)
                    info = tarfile.TarInfo(name)
                    info.mtime = epoch
                    uid, gid = owners.get(name, (0, 0))
                    info.uid, info.gid, info.uname, info.gname = uid, gid, "", ""
                    if stat.S_ISLNK(st.st_mode):
                        info.type = tarfile.SYMTYPE
                        info.linkname = os.readlink(full)
                        info.mode = 0o777
                        tar.addfile(info)
                    elif stat.S_ISDIR(st.st_mode):
                        info.type = tarfile.DIRTYPE
                        info.mode = modes.get(name, 0o755)
                        tar.addfile(info)
                    elif stat.S_ISREG(st.st_mode):
                        info.mode = modes.get(name, 0o755 if st.st_mode & 0o111 else 0o644)
                        key = (st.st_dev, st.st_ino)
                        if st.st_nlink > 1 and key in links:
                            info.type = tarfile.LNKTYPE
                            info.linkname = links[key]
                            tar.addfile(info)
                            continue
                        links[key] = name
                        info.size = st.st_size
                        with open(full, "rb") as f:
                            tar.addfile(info, f)
                    else:
                        die(f"{full}: only files, directories and symlinks go into an image")
    return "sha256:" + compressed.sha.hexdigest(), compressed.size, "sha256:" + uncompressed.sha.hexdigest()


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def iso(epoch):
    import datetime

    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def add_blob(tar, epoch, name, data=None, path=None):
    info = tarfile.TarInfo(name)
    info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = epoch, 0o644, 0, 0, "", ""
    if data is not None:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    else:
        info.size = os.path.getsize(path)
        with open(path, "rb") as f:
            tar.addfile(info, f)


def image(args):
    epoch = args.epoch
    with open(args.config) as f:
        spec = json.load(f)
    owners, modes = {}, {}
    for o in args.owner or []:
        path, _, ids = o.partition("=")
        uid, _, gid = ids.partition(":")
        owners[path.strip("/")] = (int(uid), int(gid))
    for m in args.mode or []:
        path, _, mode = m.partition("=")
        modes[path.strip("/")] = int(mode, 8)
    with tempfile.TemporaryDirectory() as tmp:
        layers, diff_ids, history = [], [], []
        for i, layer in enumerate(args.layer):
            description, _, root = layer.partition("=")
            path = os.path.join(tmp, f"layer{i}")
            digest, size, diff_id = write_layer(root, epoch, owners, modes, path)
            layers.append(
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": digest,
                    "size": size,
                    "path": path,
                    "uncompressed": sum(
                        os.lstat(p).st_size for _, p in layer_entries(root, owners) if os.path.isfile(p)
                    ),
                }
            )
            diff_ids.append(diff_id)
            history.append({"created": iso(epoch), "created_by": f"scripts/release.sh: {description}"})
        config = {
            "created": iso(epoch),
            "architecture": ARCH,
            "os": "linux",
            "config": spec,
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
            "history": history,
        }
        config_bytes = canonical(config)
        config_digest = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": len(config_bytes),
            },
            "layers": [{k: l[k] for k in ("mediaType", "digest", "size")} for l in layers],
            "annotations": dict(spec.get("Labels", {})),
        }
        manifest_bytes = canonical(manifest)
        manifest_digest = "sha256:" + hashlib.sha256(manifest_bytes).hexdigest()
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": manifest_digest,
                    "size": len(manifest_bytes),
                    "annotations": {"org.opencontainers.image.ref.name": args.ref},
                }
            ],
        }
        blobs = {config_digest: ("data", config_bytes), manifest_digest: ("data", manifest_bytes)}
        for l in layers:
            blobs[l["digest"]] = ("path", l["path"])
        partial = args.out + ".partial"
        with open(partial, "wb") as f:
            with tarfile.open(fileobj=f, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                for d in ("blobs", "blobs/sha256"):
                    info = tarfile.TarInfo(d)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, epoch
                    info.uname = info.gname = ""
                    tar.addfile(info)
                for digest in sorted(blobs):
                    kind, value = blobs[digest]
                    name = "blobs/sha256/" + digest.split(":", 1)[1]
                    if kind == "data":
                        add_blob(tar, epoch, name, data=value)
                    else:
                        add_blob(tar, epoch, name, path=value)
                add_blob(tar, epoch, "index.json", data=canonical(index))
                add_blob(tar, epoch, "oci-layout", data=canonical({"imageLayoutVersion": "1.0.0"}))
        os.replace(partial, args.out)
    result = {
        "digest": manifest_digest,
        "config": config_digest,
        "layers": [
            {"digest": l["digest"], "compressed": l["size"], "uncompressed": l["uncompressed"]} for l in layers
        ],
        "compressed": sum(l["size"] for l in layers),
        "uncompressed": sum(l["uncompressed"] for l in layers),
    }
    print(json.dumps(result, sort_keys=True))


# ---------------------------------------------------------------------------------------------
# sbom


def purl_version(v):
    return v.replace(":", "%3A").replace("+", "%2B").replace("~", "%7E")


def sbom(args):
    components = []
    for b in args.binary or []:
        # PATH_IN_IMAGE=FILE=NAME@VERSION
        where, file, nv = b.split("=", 2)
        name, _, version = nv.partition("@")
        components.append(
            {
                "type": "application",
                "name": name,
                "version": version,
                "hashes": [{"alg": "SHA-256", "content": sha256_file(file)}],
                "properties": [{"name": "captf:path", "value": where}],
                "bom-ref": f"file:{where}",
            }
        )
    for path in args.cargo_tree or []:
        # `cargo tree --prefix none -e normal --format '{p}'` lines: "name vX.Y.Z" or "name vX.Y.Z (path)"
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) < 2 or (len(parts) > 2 and parts[2].startswith("(/")):
                    continue  # a crate of this workspace: the binary itself
                name, version = parts[0], parts[1].lstrip("v")
                components.append(
                    {
                        "type": "library",
                        "name": name,
                        "version": version,
                        "purl": f"pkg:cargo/{name}@{version}",
                    }
                )
    for go_binary in args.go_binary or []:
        # WHERE=FILE: the Go modules compiled into it, from `go version -m`.
        where, file = go_binary.split("=", 1)
        out = run(["go", "version", "-m", file])
        for line in out.splitlines():
            fields = line.strip().split("\t")
            if fields[0] == "mod" and len(fields) >= 3:
                components.append(
                    {
                        "type": "application",
                        "name": fields[1],
                        "version": fields[2],
                        "purl": f"pkg:golang/{fields[1]}@{fields[2]}",
                        "hashes": [{"alg": "SHA-256", "content": sha256_file(file)}],
                        "properties": [{"name": "captf:path", "value": where}],
                    }
                )
            elif fields[0] == "dep" and len(fields) >= 3:
                components.append(
                    {
                        "type": "library",
                        "name": fields[1],
                        "version": fields[2],
                        "purl": f"pkg:golang/{fields[1]}@{fields[2]}",
                    }
                )
    for path in args.debs or []:
        with open(path) as f:
            for d in json.load(f):
                components.append(
                    {
                        "type": "library" if d["why"] != "requested" else "application",
                        "name": d["name"],
                        "version": d["version"],
                        "purl": f"pkg:deb/debian/{d['name']}@{purl_version(d['version'])}?arch={d['arch']}&distro=debian-12",
                        "hashes": [{"alg": "SHA-256", "content": d["sha256"]}],
                        "properties": [{"name": "captf:why", "value": d["why"]}],
                    }
                )
    unique = {}
    for c in components:
        c.setdefault("bom-ref", c.get("purl") or f"{c['name']}@{c['version']}")
        unique[c["bom-ref"]] = c
    components = [unique[k] for k in sorted(unique)]
    body = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "version": 1,
        "metadata": {
            "timestamp": iso(args.epoch),
            "tools": {"components": [{"type": "application", "name": "captf scripts/release.sh"}]},
            "component": {
                "type": "container",
                "bom-ref": f"{args.repository}@{args.digest}",
                "name": args.repository,
                "version": args.version,
                "hashes": [{"alg": "SHA-256", "content": args.digest.split(":", 1)[1]}],
                "purl": f"pkg:oci/{args.repository.rsplit('/', 1)[-1]}@{args.digest.replace(':', '%3A')}"
                f"?repository_url={args.repository}",
            },
        },
        "components": components,
    }
    serial = uuid.uuid5(uuid.NAMESPACE_URL, hashlib.sha256(canonical(body)).hexdigest())
    body["serialNumber"] = f"urn:uuid:{serial}"
    with open(args.out, "w") as f:
        json.dump(body, f, indent=2, sort_keys=True)
        f.write("\n")


# ---------------------------------------------------------------------------------------------
# retar


def retar(args):
    with tarfile.open(args.input, "r:gz") as src, open(args.output, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as gz:
            with tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT) as dst:
                for m in src.getmembers():
                    m.mtime = args.epoch
                    m.uid = m.gid = 0
                    m.uname = m.gname = ""
                    m.pax_headers = {}
                    dst.addfile(m, src.extractfile(m) if m.isreg() else None)


# ---------------------------------------------------------------------------------------------
# pin

COMPONENTS = ("webhook", "controller", "runner")
IMAGE_FIELDS = ("repository", "tag", "digest")


def chart_images(lines, path):
    """Each component's image in the chart's values.yaml: {component: {field: (line index, value)}}.
    values.yaml is read line by line (`<component>:` at the top, `  image:` under it, its fields
    four spaces in) so that rewriting it keeps its comments."""
    images, section, in_image = {}, None, False
    for i, line in enumerate(lines):
        top = re.match(r"^([A-Za-z][A-Za-z0-9]*):", line)
        if top:
            section, in_image = top.group(1), False
            continue
        if section not in COMPONENTS:
            continue
        if re.match(r"^  image:\s*$", line):
            in_image = True
            continue
        if re.match(r"^  \S", line):
            in_image = False
        field = re.match(r"^    (repository|tag|digest):\s*(.*?)\s*$", line) if in_image else None
        if field:
            value = field.group(2).strip('"').strip("'")
            images.setdefault(section, {})[field.group(1)] = (i, value)
    for component in COMPONENTS:
        missing = [f for f in IMAGE_FIELDS if f not in images.get(component, {})]
        if missing:
            die(f"{path} has no {', '.join(f'{component}.image.{f}' for f in missing)}")
    return images


def reference(image):
    """What the chart's `captf.image` renders: repository@digest when a digest is set, else repository:tag."""
    repository, tag, digest = (image[f][1] for f in IMAGE_FIELDS)
    return f"{repository}@{digest}" if digest else f"{repository}:{tag}"


def built_images(path):
    """{name: (repository, digest)} from a release's images/images.txt."""
    built = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            repository, _, digest = fields[1].partition("@") if len(fields) > 1 else ("", "", "")
            if fields[0] not in COMPONENTS or not repository or not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
                die(f"{path}:{n}: not '<webhook|controller|runner> <repository>@sha256:<64 hex> ...': {line.strip()}")
            built[fields[0]] = (repository, digest)
    missing = [c for c in COMPONENTS if c not in built]
    if missing:
        die(f"{path} lists no image for {', '.join(missing)}")
    return built


def pin(args):
    """Points the chart's defaults (values.yaml: repository, tag and digest of each image) and every
    reference to them in FILES at a release's images. With --check, writes nothing and fails if
    anything would change."""
    built = built_images(args.images)
    with open(args.values) as f:
        text = f.read()
    lines = text.split("\n")
    images = chart_images(lines, args.values)
    old = {c: reference(images[c]) for c in COMPONENTS}
    for c in COMPONENTS:
        repository, digest = built[c]
        for field, value in (("repository", repository), ("tag", f'"{args.tag}"'), ("digest", f'"{digest}"')):
            lines[images[c][field][0]] = f"    {field}: {value}"
    new = {c: f"{built[c][0]}@{built[c][1]}" for c in COMPONENTS}
    changes = {args.values: "\n".join(lines)} if "\n".join(lines) != text else {}
    for path in args.files:
        with open(path) as f:
            before = f.read()
        after = before
        for c in COMPONENTS:
            after = after.replace(old[c], new[c])
        if after != before:
            changes[path] = after
    for c in COMPONENTS:
        print(f"{c}: {old[c]}" + (f" -> {new[c]}" if old[c] != new[c] else " (unchanged)"), file=sys.stderr)
    if args.check:
        if changes:
            die(f"not pinned to {args.images}: {', '.join(sorted(changes))} would change")
        return
    for path, content in changes.items():
        with open(path, "w") as f:
            f.write(content)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("debroot")
    d.add_argument("--out", required=True)
    d.add_argument("--cache", required=True)
    d.add_argument("--record", required=True)
    d.add_argument("package", nargs="+", help="NAME=GLOB,!GLOB,... (paths inside the package to keep, or not)")
    i = sub.add_parser("image")
    i.add_argument("--out", required=True)
    i.add_argument("--epoch", type=int, required=True)
    i.add_argument("--ref", required=True)
    i.add_argument("--config", required=True)
    i.add_argument("--layer", action="append", required=True)
    i.add_argument("--owner", action="append")
    i.add_argument("--mode", action="append")
    s = sub.add_parser("sbom")
    s.add_argument("--out", required=True)
    s.add_argument("--epoch", type=int, required=True)
    s.add_argument("--repository", required=True)
    s.add_argument("--version", required=True)
    s.add_argument("--digest", required=True)
    s.add_argument("--binary", action="append", help="PATH_IN_IMAGE=FILE=NAME@VERSION")
    s.add_argument("--cargo-tree", action="append", help="output of cargo tree --format '{p}'")
    s.add_argument("--go-binary", action="append", help="PATH_IN_IMAGE=FILE (go version -m)")
    s.add_argument("--debs", action="append", help="the record debroot wrote")
    r = sub.add_parser("retar")
    r.add_argument("--epoch", type=int, required=True)
    r.add_argument("input")
    r.add_argument("output")
    v = sub.add_parser("pin")
    v.add_argument("--values", required=True, help="the chart's values.yaml")
    v.add_argument("--images", required=True, help="a release's images/images.txt")
    v.add_argument("--tag", required=True, help="the release's version")
    v.add_argument("--check", action="store_true", help="write nothing; fail if anything would change")
    v.add_argument("files", nargs="*", help="more files whose references to the chart's images follow")
    args = p.parse_args()
    {"debroot": debroot, "image": image, "sbom": sbom, "retar": retar, "pin": pin}[
        args.cmd
    ](args)


if __name__ == "__main__":
    main()
