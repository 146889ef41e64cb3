//! A user's authentication methods, as `CREATE USER`/`ALTER USER … IDENTIFIED WITH` set them:
//! only the methods ClickHouse accepts, each hash of the length its method needs, each method
//! accepted until its own `VALID UNTIL` (ClickHouse ≥ 24.9 holds several per user).

use jiff::Timestamp;

use super::{Refused, codes, quoted, sha256_hex};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    NoPassword,
    Plaintext,
    /// `sha256_password BY 'plain'` and `sha256_hash BY 'hex' [SALT 's']`: SHA-256 of password + salt.
    Sha256,
    /// `double_sha1_password`/`double_sha1_hash`: SHA-1 of the SHA-1 of the password.
    DoubleSha1,
    Bcrypt,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Method {
    pub kind: Kind,
    /// The plaintext (plaintext_password), hex digest (sha256, double SHA-1) or bcrypt hash.
    pub secret: String,
    pub salt: String,
    pub valid_until: Option<Timestamp>,
}

fn bad(message: String) -> Refused {
    Refused {
        code: codes::BAD_ARGUMENTS,
        message,
    }
}

fn digest(data: &[u8], algorithm: &'static ring::digest::Algorithm) -> Vec<u8> {
    ring::digest::digest(algorithm, data).as_ref().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A hash given in hex must decode to `bytes` bytes, as ClickHouse checks when it stores it.
fn check_hex(hash: &str, bytes: usize, method: &str) -> Result<String, Refused> {
    if !hash.len().is_multiple_of(2) || !hash.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(bad(
            "Cannot read password hash in hex, check for valid characters [0-9a-fA-F] and length"
                .to_owned(),
        ));
    }
    if hash.len() / 2 != bytes {
        return Err(bad(format!(
            "Password hash for the '{method}' authentication type has length {} but must be exactly {bytes} bytes.",
            hash.len() / 2
        )));
    }
    Ok(hash.to_ascii_lowercase())
}

fn double_sha1(password: &str) -> String {
    let once = digest(password.as_bytes(), &ring::digest::SHA1_FOR_LEGACY_USE_ONLY);
    hex(&digest(&once, &ring::digest::SHA1_FOR_LEGACY_USE_ONLY))
}

/// One method of an `IDENTIFIED WITH` list, from its name to the end of its clauses.
fn method(text: &str) -> Result<Method, Refused> {
    let text = text.trim();
    let (name, rest) = text.split_once(' ').unwrap_or((text, ""));
    let by = quoted(rest, "BY ");
    let salt = quoted(rest, "SALT ").unwrap_or_default().to_owned();
    let valid_until = match quoted(rest, "VALID UNTIL ") {
        Some(time) => Some(parse_time(time)?),
        None => None,
    };
    let secret = |what: &str| {
        by.map(str::to_owned)
            .ok_or_else(|| bad(format!("{name} needs BY '{what}'")))
    };
    let (kind, secret) = match name {
        "no_password" => (Kind::NoPassword, String::new()),
        "plaintext_password" => (Kind::Plaintext, secret("password")?),
        "sha256_password" => (Kind::Sha256, sha256_hex(&secret("password")?)),
        "sha256_hash" => (
            Kind::Sha256,
            check_hex(&secret("hash")?, 32, "SHA256_PASSWORD")?,
        ),
        "double_sha1_password" => (Kind::DoubleSha1, double_sha1(&secret("password")?)),
        "double_sha1_hash" => (
            Kind::DoubleSha1,
            check_hex(&secret("hash")?, 20, "DOUBLE_SHA1_PASSWORD")?,
        ),
        "bcrypt_password" => (
            Kind::Bcrypt,
            bcrypt::hash(secret("password")?, 4).map_err(|e| bad(e.to_string()))?,
        ),
        "bcrypt_hash" => {
            let hash = secret("hash")?;
            if !(59..=60).contains(&hash.len()) {
                return Err(bad(format!(
                    "Password hash for the 'BCRYPT_PASSWORD' authentication type has length {} but must be 59 or 60 bytes.",
                    hash.len()
                )));
            }
            (Kind::Bcrypt, hash)
        }
        other => {
            return Err(Refused {
                code: codes::NOT_IMPLEMENTED,
                message: format!(
                    "the ClickHouse stand-in does not model the authentication method {other}"
                ),
            });
        }
    };
    if kind == Kind::Sha256 && name == "sha256_password" && !salt.is_empty() {
        return Err(bad("SALT goes with sha256_hash only".to_owned()));
    }
    Ok(Method {
        kind,
        secret,
        salt,
        valid_until,
    })
}

/// ClickHouse reads `VALID UNTIL` as a date-time in the server's time zone (UTC here) or RFC 3339.
fn parse_time(text: &str) -> Result<Timestamp, Refused> {
    if let Ok(t) = text.parse::<Timestamp>() {
        return Ok(t);
    }
    let civil = text
        .parse::<jiff::civil::DateTime>()
        .or_else(|_| {
            text.parse::<jiff::civil::Date>()
                .map(|d| d.to_datetime(jiff::civil::Time::midnight()))
        })
        .map_err(|_| {
            bad(format!(
                "Cannot parse VALID UNTIL '{text}' as a date and time"
            ))
        })?;
    civil
        .to_zoned(jiff::tz::TimeZone::UTC)
        .map(|z| z.timestamp())
        .map_err(|e| bad(e.to_string()))
}

/// Splits a method list at the commas between methods, not those inside quotes.
fn split_methods(list: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut quote) = (0, None);
    for (i, c) in list.char_indices() {
        match (c, quote) {
            ('\'' | '`', None) => quote = Some(c),
            (c, Some(q)) if c == q => quote = None,
            (',', None) => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&list[start..]);
    parts
}

/// The end of the method list: the first clause after it.
fn list_end(text: &str) -> usize {
    [
        " HOST ",
        " DEFAULT ",
        " SETTINGS ",
        " GRANTEES ",
        " IN ",
        " RENAME ",
    ]
    .iter()
    .filter_map(|clause| outside_quotes(text, clause))
    .min()
    .unwrap_or(text.len())
}

fn outside_quotes(text: &str, needle: &str) -> Option<usize> {
    let mut quote = None;
    for (i, c) in text.char_indices() {
        match (c, quote) {
            ('\'' | '`', None) => quote = Some(c),
            (c, Some(q)) if c == q => quote = None,
            (_, None) if text[i..].starts_with(needle) => return Some(i),
            _ => {}
        }
    }
    None
}

/// The methods a `CREATE USER`/`ALTER USER` statement sets, or `None` when it sets none.
pub fn methods(sql: &str) -> Result<Option<Vec<Method>>, Refused> {
    if sql.contains(" ADD IDENTIFIED") || sql.contains(" RESET AUTHENTICATION METHODS") {
        return Err(Refused {
            code: codes::NOT_IMPLEMENTED,
            message: "the ClickHouse stand-in does not model ADD IDENTIFIED or RESET AUTHENTICATION METHODS".to_owned(),
        });
    }
    let list = if let Some(at) = outside_quotes(sql, " IDENTIFIED WITH ") {
        let rest = &sql[at + " IDENTIFIED WITH ".len()..];
        rest[..list_end(rest)].to_owned()
    } else if let Some(at) = outside_quotes(sql, " IDENTIFIED BY ") {
        // The default password type (`default_password_type`) is sha256_password.
        let rest = &sql[at + " IDENTIFIED ".len()..];
        format!("sha256_password {}", &rest[..list_end(rest)])
    } else if outside_quotes(sql, " NOT IDENTIFIED").is_some() {
        "no_password".to_owned()
    } else {
        return Ok(None);
    };
    let methods = split_methods(&list)
        .into_iter()
        .map(method)
        .collect::<Result<Vec<_>, _>>()?;
    if methods.len() > 1 && methods.iter().any(|m| m.kind == Kind::NoPassword) {
        return Err(bad(
            "Authentication method 'no_password' cannot co-exist with other authentication methods"
                .to_owned(),
        ));
    }
    if methods.len() > super::MAX_AUTHENTICATION_METHODS {
        return Err(bad("User can not be created/updated because it exceeds the allowed quantity of authentication methods per user. Check the `max_authentication_methods_per_user` setting".to_owned()));
    }
    Ok(Some(methods))
}

impl Method {
    /// Whether `password` logs in by this method at `now`.
    pub fn accepts(&self, password: &str, now: Timestamp) -> bool {
        if self.valid_until.is_some_and(|until| now >= until) {
            return false;
        }
        match self.kind {
            Kind::NoPassword => true,
            Kind::Plaintext => self.secret == password,
            Kind::Sha256 => sha256_hex(&format!("{password}{}", self.salt)) == self.secret,
            Kind::DoubleSha1 => double_sha1(password) == self.secret,
            Kind::Bcrypt => bcrypt::verify(password, &self.secret).unwrap_or(false),
        }
    }
}
