//! Small text encodings shared by the dashboard's links and redirects and the ClickHouse client.

/// Percent-encodes everything but RFC 3986's unreserved characters.
pub fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_unreserved_characters_pass_unencoded() {
        assert_eq!(
            super::percent_encode("p&w=d é~_.-"),
            "p%26w%3Dd%20%C3%A9~_.-"
        );
    }
}
