//! SHA-256 in hex: the one digest the product computes — of passwords (ClickHouse's
//! `sha256_password`), of image documents (their content address), of settings and credentials
//! (markers that change when they do, and reveal nothing of them).

pub fn sha256_hex(bytes: impl AsRef<[u8]>) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes.as_ref())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    /// Known answers from an independent tool, `printf '%s' '<input>' | sha256sum` (GNU coreutils), so
    /// the hash ClickHouse stores (and every other) is pinned to SHA-256 itself, not to this function.
    #[test]
    fn digests_are_sha256_as_coreutils_computes_it() {
        for (input, coreutils) in [
            (
                "",
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            ),
            (
                "abc",
                "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            ),
            (
                // A password of the shape the provisioner generates: 32 random bytes as hex.
                "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                "a8ae6e6ee929abea3afcfc5258c8ccd6f85273e0d4626d26c7279f3250f77c8e",
            ),
        ] {
            assert_eq!(super::sha256_hex(input), coreutils, "{input:?}");
        }
    }
}
