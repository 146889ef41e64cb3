//! The image as OCI blobs (a gzipped layer, its config, its manifest) and as one archive: an OCI
//! image layout in a tar, with Docker's `manifest.json` beside it, so `ctr images import`,
//! `kind load image-archive`, `skopeo copy oci-archive:…`, `podman load` and `docker load` all read
//! it. Every byte is a function of the entries and the tag: sorted, owned by numbers, stamped with
//! the epoch, gzipped with no name and no time.

use std::io::Write;

use serde_json::{Value, json};

use super::ImageError;
use super::rootfs::{BINARY_PATH, Body, Tree, USER};

pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
pub const LAYER_MEDIA_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
pub const INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";

/// One content-addressed document of the image.
pub struct Blob {
    pub media_type: &'static str,
    pub bytes: Vec<u8>,
}

impl Blob {
    /// `sha256:<hex>`, the name registries and runtimes know it by.
    pub fn digest(&self) -> String {
        sha256(&self.bytes)
    }

    /// The OCI descriptor that points at this blob.
    fn descriptor(&self) -> Value {
        json!({
            "mediaType": self.media_type,
            "digest": self.digest(),
            "size": self.bytes.len(),
        })
    }
}

/// `sha256:<hex>` of `bytes`: a content address, as registries and runtimes name documents.
pub fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", crate::digest::sha256_hex(bytes))
}

/// The operator image: one layer, its config and the manifest naming both.
pub struct Image {
    pub layer: Blob,
    pub config: Blob,
    pub manifest: Blob,
}

impl Image {
    /// The image of `tree`: the Dockerfile's declarations (user, entrypoint, command, ports, labels)
    /// on the layer made from it, for the architecture this binary was built for.
    pub fn build(tree: &Tree) -> Result<Self, ImageError> {
        Self::build_for(tree, architecture())
    }

    /// [`Self::build`] for the OCI `architecture` (`amd64`, `arm64`): what its config says it runs on.
    pub fn build_for(tree: &Tree, architecture: &str) -> Result<Self, ImageError> {
        let tar = layer_tar(tree)?;
        let diff_id = sha256(&tar);
        let layer = Blob {
            media_type: LAYER_MEDIA_TYPE,
            bytes: gzip(&tar)?,
        };
        let config = Blob {
            media_type: CONFIG_MEDIA_TYPE,
            bytes: to_json(&config(&diff_id, architecture)),
        };
        let manifest = Blob {
            media_type: MANIFEST_MEDIA_TYPE,
            bytes: to_json(&json!({
                "schemaVersion": 2,
                "mediaType": MANIFEST_MEDIA_TYPE,
                "config": config.descriptor(),
                "layers": [layer.descriptor()],
            })),
        };
        Ok(Self {
            layer,
            config,
            manifest,
        })
    }

    /// The image's digest: its manifest's, which `ctr`, `crictl` and registries show.
    pub fn digest(&self) -> String {
        self.manifest.digest()
    }

    /// The OCI platform its config names: `{"architecture": …, "os": …}`.
    pub fn platform(&self) -> Value {
        let config: Value = serde_json::from_slice(&self.config.bytes).expect("our own config");
        json!({"architecture": config["architecture"], "os": config["os"]})
    }

    /// The manifest's descriptor with its platform: this image's entry in an image index.
    pub fn index_entry(&self) -> Value {
        let mut entry = self.manifest.descriptor();
        entry["platform"] = self.platform();
        entry
    }

    /// The archive that names the image `tag` (`registry/repository:tag`), written to `out`.
    pub fn write_archive(&self, tag: &str, out: impl Write) -> Result<(), ImageError> {
        let blob_path = |blob: &Blob| format!("blobs/{}", blob.digest().replace(':', "/"));
        let index = json!({
            "schemaVersion": 2,
            "mediaType": INDEX_MEDIA_TYPE,
            "manifests": [{
                "mediaType": MANIFEST_MEDIA_TYPE,
                "digest": self.manifest.digest(),
                "size": self.manifest.bytes.len(),
                "platform": {"architecture": architecture(), "os": "linux"},
                "annotations": {
                    // containerd (ctr, kind) names the image by this one…
                    "io.containerd.image.name": tag,
                    // …and the OCI convention, which skopeo's oci-archive:FILE:TAG matches, by the tag.
                    "org.opencontainers.image.ref.name": tag_of(tag),
                },
            }],
        });
        // What `docker load` (and podman's docker-archive reader) go by.
        let docker = json!([{
            "Config": blob_path(&self.config),
            "RepoTags": [tag],
            "Layers": [blob_path(&self.layer)],
        }]);
        let (index, docker) = (to_json(&index), to_json(&docker));
        // Borrowed, not copied: the layer is the whole binary, compressed.
        let mut files: Vec<(String, &[u8])> = vec![
            ("oci-layout".into(), br#"{"imageLayoutVersion":"1.0.0"}"#),
            ("index.json".into(), &index),
            ("manifest.json".into(), &docker),
        ];
        for blob in [&self.layer, &self.config, &self.manifest] {
            files.push((blob_path(blob), &blob.bytes));
        }
        files.sort();
        let mut archive = tar::Builder::new(out);
        for dir in ["blobs", "blobs/sha256"] {
            append(&mut archive, &format!("{dir}/"), 0o755, 0, None)?;
        }
        for (path, bytes) in &files {
            append(&mut archive, path, 0o644, 0, Some(bytes))?;
        }
        archive.into_inner()?.flush()?;
        Ok(())
    }
}

/// The image config: what the Dockerfile declares for its last stage, plus the binary's version.
fn config(diff_id: &str, architecture: &str) -> Value {
    json!({
        "architecture": architecture,
        "os": "linux",
        "config": {
            "User": USER,
            "Entrypoint": [BINARY_PATH],
            "Cmd": ["run"],
            "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"],
            "ExposedPorts": {"8080/tcp": {}, "8081/tcp": {}},
            "Labels": {
                "org.opencontainers.image.source": "https://github.com/sentry-tenants/sentry-tenants",
                "org.opencontainers.image.licenses": "Apache-2.0",
                "org.opencontainers.image.title": "sentry-tenants",
                "org.opencontainers.image.version": env!("CARGO_PKG_VERSION"),
            },
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "sentry-tenants image export"}],
    })
}

/// The OCI architecture name of the machine this binary was built for.
pub fn architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// The tag of `registry/repository:tag` (after the last ':' that follows the last '/').
fn tag_of(reference: &str) -> &str {
    let name_start = reference.rfind('/').map_or(0, |slash| slash + 1);
    reference[name_start..]
        .rsplit_once(':')
        .map_or("latest", |(_, tag)| tag)
}

fn to_json(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).expect("a JSON value serializes")
}

/// The layer as a tar: paths without a leading '/', directories with a trailing one.
fn layer_tar(tree: &Tree) -> Result<Vec<u8>, ImageError> {
    let mut layer = tar::Builder::new(Vec::new());
    for (path, entry) in tree {
        match &entry.body {
            Body::Dir => append(
                &mut layer,
                &format!("{path}/"),
                entry.mode,
                entry.owner,
                None,
            )?,
            Body::File(bytes) => append(&mut layer, path, entry.mode, entry.owner, Some(bytes))?,
        }
    }
    Ok(layer.into_inner()?)
}

/// One tar entry with every field that could vary fixed: a directory when `bytes` is `None`.
fn append<W: Write>(
    archive: &mut tar::Builder<W>,
    path: &str,
    mode: u32,
    owner: u64,
    bytes: Option<&[u8]>,
) -> Result<(), ImageError> {
    let mut header = tar::Header::new_ustar();
    header.set_entry_type(match bytes {
        Some(_) => tar::EntryType::Regular,
        None => tar::EntryType::Directory,
    });
    header.set_mode(mode);
    header.set_uid(owner);
    header.set_gid(owner);
    header.set_mtime(0);
    let bytes = bytes.unwrap_or_default();
    header.set_size(bytes.len() as u64);
    archive.append_data(&mut header, path, bytes)?;
    Ok(())
}

/// gzip with no file name and mtime 0 in its header: the same tar gives the same bytes.
fn gzip(bytes: &[u8]) -> Result<Vec<u8>, ImageError> {
    let mut encoder = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes)?;
    Ok(encoder.finish()?)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::io::Read;

    use super::*;
    use crate::image::rootfs::Entry;

    #[test]
    fn sha256_is_the_standard_one() {
        // FIPS 180-2's first test vector.
        assert_eq!(
            sha256(b"abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    fn small_tree() -> Tree {
        let file = |bytes: &[u8], mode| Entry {
            mode,
            owner: 0,
            body: Body::File(bytes.to_vec()),
        };
        let dir = |mode, owner| Entry {
            mode,
            owner,
            body: Body::Dir,
        };
        Tree::from([
            ("etc".into(), dir(0o755, 0)),
            (
                "etc/passwd".into(),
                file(b"nonroot:x:65532:65532::/:\n", 0o644),
            ),
            ("home".into(), dir(0o755, 0)),
            ("home/nonroot".into(), dir(0o700, 65532)),
            ("usr".into(), dir(0o755, 0)),
            ("usr/local".into(), dir(0o755, 0)),
            ("usr/local/bin".into(), dir(0o755, 0)),
            (
                "usr/local/bin/sentry-tenants".into(),
                file(b"\x7fELF...", 0o755),
            ),
        ])
    }

    /// Every entry of a tar: path → (mode, uid, gid, mtime, contents).
    fn entries(tar: &[u8]) -> BTreeMap<String, (u32, u64, u64, u64, Vec<u8>)> {
        let mut archive = tar::Archive::new(tar);
        let mut out = BTreeMap::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let header = entry.header().clone();
            let mut contents = Vec::new();
            entry.read_to_end(&mut contents).unwrap();
            let path = entry.path().unwrap().to_string_lossy().into_owned();
            let fields = (
                header.mode().unwrap(),
                header.uid().unwrap(),
                header.gid().unwrap(),
                header.mtime().unwrap(),
                contents,
            );
            out.insert(path, fields);
        }
        out
    }

    fn gunzip(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(bytes)
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    #[test]
    fn the_layer_is_the_tree_with_owners_and_modes_and_no_time() {
        let image = Image::build(&small_tree()).unwrap();
        let layer = entries(&gunzip(&image.layer.bytes));
        let paths: Vec<&str> = layer.keys().map(String::as_str).collect();
        assert_eq!(
            paths,
            [
                "etc/",
                "etc/passwd",
                "home/",
                "home/nonroot/",
                "usr/",
                "usr/local/",
                "usr/local/bin/",
                "usr/local/bin/sentry-tenants"
            ]
        );
        assert_eq!(layer["home/nonroot/"].0, 0o700);
        assert_eq!(
            (layer["home/nonroot/"].1, layer["home/nonroot/"].2),
            (65532, 65532)
        );
        assert_eq!(layer["usr/local/bin/sentry-tenants"].0, 0o755);
        assert_eq!(layer["usr/local/bin/sentry-tenants"].4, b"\x7fELF...");
        assert!(layer.values().all(|e| e.3 == 0), "every mtime is the epoch");
        // gzip's header: no name flag, mtime 0.
        assert_eq!(image.layer.bytes[3], 0, "FLG");
        assert_eq!(image.layer.bytes[4..8], [0, 0, 0, 0], "MTIME");
    }

    #[test]
    fn the_config_declares_what_the_dockerfile_does_and_names_the_uncompressed_layer() {
        let image = Image::build(&small_tree()).unwrap();
        let config: Value = serde_json::from_slice(&image.config.bytes).unwrap();
        assert_eq!(config["config"]["User"], "65532:65532");
        assert_eq!(
            config["config"]["Entrypoint"],
            json!(["/usr/local/bin/sentry-tenants"])
        );
        assert_eq!(config["config"]["Cmd"], json!(["run"]));
        assert_eq!(config["os"], "linux");
        let diff_id = &config["rootfs"]["diff_ids"][0];
        assert_eq!(*diff_id, sha256(&gunzip(&image.layer.bytes)).as_str());
        let manifest: Value = serde_json::from_slice(&image.manifest.bytes).unwrap();
        assert_eq!(manifest["config"]["digest"], image.config.digest().as_str());
        assert_eq!(manifest["config"]["size"], image.config.bytes.len());
        assert_eq!(
            manifest["layers"][0]["digest"],
            image.layer.digest().as_str()
        );
        assert_eq!(manifest["layers"][0]["mediaType"], LAYER_MEDIA_TYPE);
    }

    #[test]
    fn the_same_tree_gives_the_same_archive_byte_for_byte_and_another_a_new_digest() {
        let tag = "registry.example.com/team/sentry-tenants:v1";
        let write = |tree: &Tree| {
            let mut out = Vec::new();
            Image::build(tree)
                .unwrap()
                .write_archive(tag, &mut out)
                .unwrap();
            out
        };
        assert_eq!(write(&small_tree()), write(&small_tree()));
        let mut other = small_tree();
        other.get_mut("etc/passwd").unwrap().mode = 0o600;
        assert_ne!(
            Image::build(&other).unwrap().digest(),
            Image::build(&small_tree()).unwrap().digest()
        );
    }

    #[test]
    fn the_archive_is_an_oci_layout_naming_the_image_for_containerd_skopeo_and_docker() {
        let image = Image::build(&small_tree()).unwrap();
        let tag = "registry.example.com:5000/team/sentry-tenants:v1.2.3";
        let mut out = Vec::new();
        image.write_archive(tag, &mut out).unwrap();
        let files = entries(&out);
        let json_of = |path: &str| -> Value { serde_json::from_slice(&files[path].4).unwrap() };
        assert_eq!(
            json_of("oci-layout"),
            json!({"imageLayoutVersion": "1.0.0"})
        );
        let index = json_of("index.json");
        let entry = &index["manifests"][0];
        assert_eq!(entry["digest"], image.digest().as_str());
        assert_eq!(entry["annotations"]["io.containerd.image.name"], tag);
        assert_eq!(
            entry["annotations"]["org.opencontainers.image.ref.name"],
            "v1.2.3"
        );
        let docker = json_of("manifest.json");
        assert_eq!(docker[0]["RepoTags"], json!([tag]));
        let config_path = docker[0]["Config"].as_str().unwrap();
        assert_eq!(files[config_path].4, image.config.bytes);
        for (path, (_, _, _, mtime, bytes)) in &files {
            assert_eq!(*mtime, 0, "{path}");
            if let Some(hex) = path.strip_prefix("blobs/sha256/").filter(|h| !h.is_empty()) {
                assert_eq!(
                    sha256(bytes),
                    format!("sha256:{hex}"),
                    "a blob is named by its digest"
                );
            }
        }
        let blobs = files
            .keys()
            .filter(|p| p.len() > "blobs/sha256/".len())
            .count();
        assert_eq!(blobs, 3, "layer, config, manifest");
    }

    #[test]
    fn a_reference_without_a_tag_is_latest_and_a_registry_port_is_no_tag() {
        assert_eq!(
            tag_of("ghcr.io/sentry-tenants/sentry-tenants:v0.1.0"),
            "v0.1.0"
        );
        assert_eq!(tag_of("localhost:5000/sentry-tenants"), "latest");
        assert_eq!(tag_of("sentry-tenants"), "latest");
    }
}
