#!/usr/bin/env python3
"""Writes a one-layer OCI image layout from files on this machine, without Docker.

    oci_image.py OUT_DIR --tag TAG [--file SRC=DST[:MODE]]... [--dir DST]... [--user UID:GID]
                 [--entrypoint JSON] [--cmd JSON] [--expose PORT/PROTO]... [--label K=V]...
                 [--env K=V]... [--created RFC3339]
    oci_image.py OUT_DIR --tag TAG --base ARCHIVE --entrypoint JSON

The second form is the image of an OCI archive (`sentry-tenants image export`) with another
entrypoint, its layers and the rest of its config kept: the tests' drills (an operator that exits
at once) start from the product's own image.

Reproducible: the same inputs give the same digest. Entries are sorted, owned by 0:0 (files keep the
mode given, default 0755 for executables and 0644 otherwise), stamped with --created (default the Unix
epoch), and the layer is gzipped with no name and no time in its header. OUT_DIR is replaced.
"""
import argparse
import datetime
import gzip
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--tag", required=True)
    p.add_argument("--file", action="append", default=[], metavar="SRC=DST[:MODE]")
    p.add_argument("--dir", action="append", default=[], metavar="DST[:MODE]")
    p.add_argument("--user")
    p.add_argument("--entrypoint")
    p.add_argument("--cmd")
    p.add_argument("--workdir")
    p.add_argument("--expose", action="append", default=[])
    p.add_argument("--label", action="append", default=[])
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--created", default="1970-01-01T00:00:00Z")
    p.add_argument("--base", metavar="ARCHIVE")
    return p.parse_args(argv)


def split_mode(spec, default):
    if ":" in spec:
        path, mode = spec.rsplit(":", 1)
        return path, int(mode, 8)
    return spec, default


def layer_tar(files, dirs, mtime):
    """The layer: every file and directory with its parents, sorted by path."""
    entries = {}
    for path, mode in dirs:
        entries[path.strip("/")] = ("dir", None, mode)
    for src, dst, mode in files:
        entries[dst.strip("/")] = ("file", src, mode)
    for path in list(entries):
        parent = os.path.dirname(path)
        while parent and parent not in entries:
            entries[parent] = ("dir", None, 0o755)
            parent = os.path.dirname(parent)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(entries):
            kind, src, mode = entries[path]
            info = tarfile.TarInfo(path)
            info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = mtime, mode, 0, 0, "", ""
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                with open(src, "rb") as f:
                    data = f.read()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def write_blob(out, data):
    digest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(out, "blobs", "sha256", digest), "wb") as f:
        f.write(data)
    return "sha256:" + digest


def write_layout(out, tag, config_bytes, layers):
    """OUT_DIR as an OCI layout of one image: its config, its layers [(media type, bytes)]."""
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "blobs", "sha256"))
    descriptors = [{"mediaType": media_type, "digest": write_blob(out, data), "size": len(data)}
                   for media_type, data in layers]
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": write_blob(out, config_bytes), "size": len(config_bytes)},
        "layers": descriptors,
    }
    manifest_bytes = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    manifest_digest = write_blob(out, manifest_bytes)
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": manifest["mediaType"], "digest": manifest_digest,
                       "size": len(manifest_bytes),
                       "annotations": {"org.opencontainers.image.ref.name": tag}}],
    }
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump(index, f, sort_keys=True, separators=(",", ":"))
    with open(os.path.join(out, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    # The last line: what a push of this layout keeps (skopeo copies OCI manifests byte for byte).
    print(manifest_digest)


def rebased(a):
    """The image of the archive a.base with a.entrypoint."""
    with tarfile.open(a.base) as archive:
        read = lambda name: archive.extractfile(name).read()
        blob = lambda digest: read("blobs/" + digest.replace(":", "/"))
        index = json.loads(read("index.json"))
        manifest = json.loads(blob(index["manifests"][0]["digest"]))
        config = json.loads(blob(manifest["config"]["digest"]))
        layers = [(layer["mediaType"], blob(layer["digest"])) for layer in manifest["layers"]]
    config["config"]["Entrypoint"] = json.loads(a.entrypoint)
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    write_layout(a.out, a.tag, config_bytes, layers)


def main(argv):
    a = parse_args(argv)
    if a.base:
        return rebased(a)
    created = a.created
    mtime = int(datetime.datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp())
    files = []
    for spec in a.file:
        src, rest = spec.split("=", 1)
        dst, mode = split_mode(rest, 0o755 if os.access(src, os.X_OK) else 0o644)
        files.append((src, dst, mode))
    dirs = [split_mode(d, 0o755) for d in a.dir]

    tar = layer_tar(files, dirs, mtime)
    gz = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=gz, mtime=0, compresslevel=6) as z:
        z.write(tar)
    layer = gz.getvalue()

    config = {}
    if a.user:
        config["User"] = a.user
    if a.entrypoint:
        config["Entrypoint"] = json.loads(a.entrypoint)
    if a.cmd:
        config["Cmd"] = json.loads(a.cmd)
    if a.workdir:
        config["WorkingDir"] = a.workdir
    if a.expose:
        config["ExposedPorts"] = {p: {} for p in sorted(a.expose)}
    if a.label:
        config["Labels"] = dict(sorted(l.split("=", 1) for l in a.label))
    config["Env"] = ["PATH=/usr/local/bin:/usr/bin:/bin"] + a.env
    image_config = {
        "created": created,
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(tar).hexdigest()]},
        "history": [{"created": created, "created_by": "scripts/oci_image.py"}],
    }
    config_bytes = json.dumps(image_config, sort_keys=True, separators=(",", ":")).encode()
    write_layout(a.out, a.tag, config_bytes, [("application/vnd.oci.image.layer.v1.tar+gzip", layer)])
    print(f"layer {len(layer)} bytes compressed, {len(tar)} bytes", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
