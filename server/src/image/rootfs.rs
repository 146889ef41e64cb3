//! The image's one layer: this binary at the path the Deployment runs, and what it needs beside it in
//! an image with no shell and no package manager — its shared libraries if it has any (a static
//! release build has none), the CA bundle for `https://` ClickHouse, and a user for 65532.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::ImageError;

/// Where the binary lives in the image: the Dockerfile's path, which the entrypoint names.
pub const BINARY_PATH: &str = "/usr/local/bin/sentry-tenants";
/// The Dockerfile's `USER`: "nonroot" of distroless, which Pod Security "restricted" wants non-zero.
pub const USER: &str = "65532:65532";
const NONROOT: u64 = 65532;
/// Where rustls' native roots (and most TLS stacks) look for the system's CA bundle.
const CA_BUNDLE_PATH: &str = "/etc/ssl/certs/ca-certificates.crt";

/// One file or directory of the layer, owned by `owner` (uid and gid alike).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub mode: u32,
    pub owner: u64,
    pub body: Body,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    Dir,
    File(Vec<u8>),
}

/// The layer's entries by path without its leading '/', every parent directory included; sorted, so
/// a directory comes before what it holds and the same inputs give the same layer.
pub type Tree = BTreeMap<String, Entry>;

/// The root filesystem for `binary`, the running executable: its bytes, and, when it is dynamically
/// linked, the loader it names and the libraries this process has mapped (the ones that loader found
/// for it on this machine).
pub fn tree(binary: &Path) -> Result<Tree, ImageError> {
    let bytes = std::fs::read(binary).map_err(|e| ImageError::Read(binary.to_owned(), e))?;
    let mut tree = Tree::new();
    let mut add = |path: &str, mode: u32, owner: u64, body: Body| {
        add_with_parents(&mut tree, path, Entry { mode, owner, body });
    };
    for (path, host) in shared_objects(&bytes, binary)? {
        let body = std::fs::read(&host).map_err(|e| ImageError::Read(host.clone(), e))?;
        add(&path, 0o755, 0, Body::File(body));
    }
    add(BINARY_PATH, 0o755, 0, Body::File(bytes));
    add(
        CA_BUNDLE_PATH,
        0o644,
        0,
        Body::File(ca_bundle().into_bytes()),
    );
    add("/etc/passwd", 0o644, 0, Body::File(PASSWD.into()));
    add("/etc/group", 0o644, 0, Body::File(GROUP.into()));
    add("/home/nonroot", 0o700, NONROOT, Body::Dir);
    // Sticky and world-writable, as on any Linux: a tool that writes a temporary file finds a place.
    add("/tmp", 0o1777, 0, Body::Dir);
    Ok(tree)
}

const PASSWD: &str = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n";
const GROUP: &str = "root:x:0:\nnonroot:x:65532:\n";

fn add_with_parents(tree: &mut Tree, path: &str, entry: Entry) {
    let path = path.trim_start_matches('/');
    for (slash, _) in path.match_indices('/') {
        tree.entry(path[..slash].to_owned()).or_insert(Entry {
            mode: 0o755,
            owner: 0,
            body: Body::Dir,
        });
    }
    tree.insert(path.to_owned(), entry);
}

/// Mozilla's root certificates as carried in this binary (webpki-root-certs), in PEM: the image's
/// bundle depends on the binary alone, so the same binary gives the same image on any machine.
pub fn ca_bundle() -> String {
    use base64::Engine as _;
    let mut pem = String::new();
    for cert in webpki_root_certs::TLS_SERVER_ROOT_CERTS {
        let b64 = base64::engine::general_purpose::STANDARD.encode(cert.as_ref());
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in b64.as_bytes().chunks(64) {
            pem.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    pem
}

/// For a dynamically linked `elf`: (path in the image, file on this machine) for its loader, at the
/// path the binary names it by, and for each library this process has mapped, at the path it was
/// mapped from (a directory the loader searches). Nothing for a static binary.
fn shared_objects(elf: &[u8], binary: &Path) -> Result<Vec<(String, PathBuf)>, ImageError> {
    let Some(loader) = interpreter(elf)? else {
        return Ok(Vec::new());
    };
    let loader_file =
        std::fs::canonicalize(&loader).map_err(|e| ImageError::Read(PathBuf::from(&loader), e))?;
    let binary_file = std::fs::canonicalize(binary).unwrap_or_else(|_| binary.to_owned());
    let maps = std::fs::read_to_string("/proc/self/maps")
        .map_err(|e| ImageError::Read(PathBuf::from("/proc/self/maps"), e))?;
    let mut objects = vec![(loader.clone(), loader_file.clone())];
    for mapped in mapped_libraries(&maps) {
        if mapped != loader_file && mapped != binary_file {
            objects.push((mapped.to_string_lossy().into_owned(), mapped));
        }
    }
    Ok(objects)
}

/// The shared libraries in a `/proc/<pid>/maps` text: each file whose name has ".so", once.
pub fn mapped_libraries(maps: &str) -> Vec<PathBuf> {
    let mut libraries: Vec<PathBuf> = maps
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .filter(|path| path.starts_with('/'))
        .filter(|path| {
            let name = path.rsplit('/').next().unwrap_or_default();
            name.ends_with(".so") || name.contains(".so.")
        })
        .map(PathBuf::from)
        .collect();
    libraries.sort();
    libraries.dedup();
    libraries
}

/// The program interpreter an ELF executable names (its PT_INTERP segment): the dynamic loader, or
/// `None` for a static executable. Only 64-bit little-endian ELF (x86-64, arm64) is read.
pub fn interpreter(elf: &[u8]) -> Result<Option<String>, ImageError> {
    const PT_INTERP: u32 = 3;
    let not_elf = || ImageError::NotElf64;
    if elf.get(..6) != Some(b"\x7fELF\x02\x01") {
        return Err(not_elf());
    }
    let u16_at = |at: usize| -> Option<usize> {
        Some(u16::from_le_bytes(elf.get(at..at + 2)?.try_into().ok()?) as usize)
    };
    let u64_at = |at: usize| -> Option<usize> {
        usize::try_from(u64::from_le_bytes(elf.get(at..at + 8)?.try_into().ok()?)).ok()
    };
    let phoff = u64_at(0x20).ok_or_else(not_elf)?;
    let phentsize = u16_at(0x36).ok_or_else(not_elf)?;
    let phnum = u16_at(0x38).ok_or_else(not_elf)?;
    for i in 0..phnum {
        let header = phoff + i * phentsize;
        let kind = elf
            .get(header..header + 4)
            .ok_or_else(not_elf)
            .map(|b| u32::from_le_bytes(b.try_into().expect("four bytes")))?;
        if kind != PT_INTERP {
            continue;
        }
        let offset = u64_at(header + 8).ok_or_else(not_elf)?;
        let size = u64_at(header + 32).ok_or_else(not_elf)?;
        let raw = elf.get(offset..offset + size).ok_or_else(not_elf)?;
        let path = raw.split(|b| *b == 0).next().unwrap_or_default();
        return Ok(Some(String::from_utf8_lossy(path).into_owned()));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_maps_text_gives_each_mapped_library_once_and_nothing_else() {
        let maps = "\
55d0c0a00000-55d0c0b00000 r--p 00000000 08:01 1 /usr/local/bin/sentry-tenants
7f0000000000-7f0000001000 r--p 00000000 08:01 2 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000001000-7f0000002000 r-xp 00001000 08:01 2 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000003000-7f0000004000 r--p 00000000 08:01 3 /usr/lib/x86_64-linux-gnu/libgcc_s.so.1
7f0000005000-7f0000006000 r--p 00000000 08:01 4 /usr/lib/locale/C.utf8/LC_CTYPE
7f0000007000-7f0000008000 rw-p 00000000 00:00 0 [heap]
7f0000009000-7f000000a000 r--p 00000000 08:01 5 /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
7ffd00000000-7ffd00001000 r-xp 00000000 00:00 0 [vdso]
";
        assert_eq!(
            mapped_libraries(maps),
            [
                "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
                "/usr/lib/x86_64-linux-gnu/libc.so.6",
                "/usr/lib/x86_64-linux-gnu/libgcc_s.so.1",
            ]
            .map(PathBuf::from)
        );
    }

    /// A 64-bit little-endian ELF header with `phdrs` program headers (type, contents) after it.
    fn elf_with(phdrs: &[(u32, &[u8])]) -> Vec<u8> {
        let mut elf = vec![0u8; 64];
        elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
        elf[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        elf[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        elf[0x38..0x3a].copy_from_slice(&(phdrs.len() as u16).to_le_bytes());
        let data_start = 64 + 56 * phdrs.len();
        let mut data = Vec::new();
        for (kind, contents) in phdrs {
            let mut header = vec![0u8; 56];
            header[..4].copy_from_slice(&kind.to_le_bytes());
            header[8..16].copy_from_slice(&((data_start + data.len()) as u64).to_le_bytes());
            header[32..40].copy_from_slice(&(contents.len() as u64).to_le_bytes());
            elf.extend(header);
            data.extend_from_slice(contents);
        }
        elf.extend(data);
        elf
    }

    #[test]
    fn the_interpreter_is_read_from_the_pt_interp_segment_and_a_static_binary_has_none() {
        let dynamic = elf_with(&[(6, b"phdr"), (3, b"/lib/ld-musl-x86_64.so.1\0")]);
        assert_eq!(
            interpreter(&dynamic).unwrap().as_deref(),
            Some("/lib/ld-musl-x86_64.so.1")
        );
        let r#static = elf_with(&[(1, b"load"), (6, b"phdr")]);
        assert_eq!(interpreter(&r#static).unwrap(), None);
    }

    #[test]
    fn what_is_not_a_64_bit_little_endian_elf_is_refused() {
        let mut elf32 = elf_with(&[]);
        elf32[4] = 1;
        let mut big_endian = elf_with(&[]);
        big_endian[5] = 2;
        let truncated = elf_with(&[(3, b"/lib64/ld-linux-x86-64.so.2\0")])[..100].to_vec();
        for bytes in [b"#!/bin/sh\n".to_vec(), elf32, big_endian, truncated] {
            assert!(matches!(interpreter(&bytes), Err(ImageError::NotElf64)));
        }
    }

    #[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
    #[test]
    fn this_glibc_test_binary_names_the_x86_64_loader() {
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(
            interpreter(&exe).unwrap().as_deref(),
            Some("/lib64/ld-linux-x86-64.so.2")
        );
    }

    #[test]
    fn the_ca_bundle_holds_every_root_of_the_binary_as_pem() {
        use base64::Engine as _;
        let bundle = ca_bundle();
        let ders: Vec<Vec<u8>> = bundle
            .split("-----END CERTIFICATE-----\n")
            .filter(|pem| !pem.is_empty())
            .map(|pem| {
                let body = pem.strip_prefix("-----BEGIN CERTIFICATE-----\n").unwrap();
                assert!(body.lines().all(|line| line.len() <= 64));
                base64::engine::general_purpose::STANDARD
                    .decode(body.replace('\n', ""))
                    .unwrap()
            })
            .collect();
        let roots: Vec<Vec<u8>> = webpki_root_certs::TLS_SERVER_ROOT_CERTS
            .iter()
            .map(|c| c.as_ref().to_vec())
            .collect();
        assert!(roots.len() > 100, "Mozilla's program has ~150 roots");
        assert_eq!(ders, roots);
    }

    #[test]
    fn the_tree_has_the_binary_its_user_and_every_parent_directory() {
        let exe = std::env::current_exe().unwrap();
        let tree = tree(&exe).unwrap();
        assert_eq!(
            tree["usr/local/bin/sentry-tenants"].body,
            Body::File(std::fs::read(&exe).unwrap())
        );
        assert_eq!(tree["usr/local/bin/sentry-tenants"].mode, 0o755);
        let Body::File(passwd) = &tree["etc/passwd"].body else {
            panic!("no /etc/passwd");
        };
        assert!(
            String::from_utf8_lossy(passwd)
                .contains("nonroot:x:65532:65532:nonroot:/home/nonroot:")
        );
        assert_eq!(tree["home/nonroot"].owner, 65532);
        assert_eq!(tree["tmp"].mode, 0o1777);
        for path in tree.keys() {
            let mut parent = Path::new(path).parent();
            while let Some(dir) = parent.filter(|d| !d.as_os_str().is_empty()) {
                let entry = &tree[dir.to_str().unwrap()];
                assert_eq!(entry.body, Body::Dir, "{path}: {dir:?}");
                parent = dir.parent();
            }
        }
    }
}
