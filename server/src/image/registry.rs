//! Pushing the image to a registry, as the OCI distribution spec says: each blob uploaded unless the
//! registry has it (HEAD, then POST and a monolithic PUT with its digest), then the manifest PUT under
//! the tag. Authentication as registries ask for it in their `WWW-Authenticate` challenge: Basic with
//! the credentials, or Bearer with a token fetched from the named realm with them (Docker Hub, GHCR,
//! Harbor…). No OCI client crate fits: `oci-client` brings a second HTTP stack (reqwest) beside the
//! hyper client this binary already has.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::archive::{Blob, INDEX_MEDIA_TYPE, Image, MANIFEST_MEDIA_TYPE, sha256};

/// What a tag may name, as the Accept header lists it: OCI and Docker images and indexes.
const MANIFEST_TYPES: [&str; 4] = [
    INDEX_MEDIA_TYPE,
    MANIFEST_MEDIA_TYPE,
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
];

/// Where an image goes: `registry[:port]/repository[:tag]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// As written (`docker.io`, `registry.example.com:5000`).
    pub registry: String,
    pub repository: String,
    pub tag: String,
}

impl Reference {
    /// `REPOSITORY[:TAG]`, whose first component names the registry (it has a '.' or a ':', or is
    /// `localhost`); the tag defaults to this binary's version.
    pub fn parse(s: &str) -> Result<Self, super::ImageError> {
        let bad = || super::ImageError::Reference(s.to_owned());
        crate::flags::ValueError::check_image_tag(s).map_err(|_| bad())?;
        let (registry, rest) = s.split_once('/').ok_or_else(bad)?;
        let is_registry = registry.contains(['.', ':']) || registry == "localhost";
        if !is_registry || rest.is_empty() {
            return Err(bad());
        }
        let (repository, tag) = match rest.rsplit_once(':') {
            Some((repository, tag)) => (repository, tag.to_owned()),
            None => (rest, format!("v{}", env!("CARGO_PKG_VERSION"))),
        };
        Ok(Self {
            registry: registry.to_owned(),
            repository: repository.to_owned(),
            tag,
        })
    }

    /// The host the registry's API is served from: Docker Hub's differs from its name.
    fn api_host(&self) -> &str {
        match self.registry.as_str() {
            "docker.io" | "index.docker.io" => "registry-1.docker.io",
            other => other,
        }
    }

    /// The pushed image by digest: what `install` pins the Deployment to.
    pub fn by_digest(&self, digest: &str) -> String {
        format!("{}/{}@{digest}", self.registry, self.repository)
    }
}

#[derive(Clone)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({}, <password>)", self.username)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error("cannot reach the registry {0}: {1}")]
    Unreachable(String, String),
    #[error(
        "the registry {0} wants credentials: give --username and --password-stdin, or log in with `docker login {0}`"
    )]
    NeedsCredentials(String),
    #[error("the registry {registry} refused the credentials of {username:?} ({status})")]
    Refused {
        registry: String,
        username: String,
        status: StatusCode,
    },
    #[error("the registry {registry} answered {status} to {what}: {body}")]
    Unexpected {
        registry: String,
        what: String,
        status: StatusCode,
        body: String,
    },
    #[error("the registry {0} stored the manifest as {1}, not as the pushed {2}")]
    DigestMismatch(String, String, String),
}

/// How every request authenticates, once the registry's challenge is known.
#[derive(Clone)]
enum Authorization {
    None,
    Basic(String),
    Bearer(String),
}

pub struct Registry {
    client: Client<crate::tls::Connector, Full<Bytes>>,
    base: String,
    reference: Reference,
    authorization: Authorization,
}

/// A request's whole answer: status, headers, body (bounded: registries answer small documents).
struct Answer {
    status: StatusCode,
    headers: http::HeaderMap,
    body: Bytes,
}

impl Answer {
    fn text(&self) -> String {
        let text = String::from_utf8_lossy(&self.body);
        text.chars().take(300).collect::<String>().trim().to_owned()
    }
}

const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// A blob's upload: the binary is tens of MB, over whatever link the user has.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(600);

impl Registry {
    /// Connects to the reference's registry (over `https://` unless `plain_http`) and authenticates
    /// as its challenge asks, with `credentials` when it asks for any.
    pub async fn connect(
        reference: &Reference,
        connector: crate::tls::Connector,
        plain_http: bool,
        credentials: Option<&Credentials>,
    ) -> Result<Self, PushError> {
        let scheme = if plain_http { "http" } else { "https" };
        let mut registry = Self {
            client: Client::builder(TokioExecutor::new()).build(connector),
            base: format!("{scheme}://{}", reference.api_host()),
            reference: reference.clone(),
            authorization: Authorization::None,
        };
        let ping = registry.send(Method::GET, "/v2/", None, &[]).await?;
        if ping.status == StatusCode::UNAUTHORIZED {
            let challenge = ping
                .headers
                .get(header::WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("Basic")
                .to_owned();
            let credentials = credentials
                .ok_or_else(|| PushError::NeedsCredentials(reference.registry.clone()))?;
            registry.authorization = registry.authorize(&challenge, credentials).await?;
            let again = registry.send(Method::GET, "/v2/", None, &[]).await?;
            registry.refused_unless_ok(&again, credentials)?;
        } else if !ping.status.is_success() {
            return Err(registry.unexpected("GET /v2/", &ping));
        }
        Ok(registry)
    }

    async fn authorize(
        &self,
        challenge: &str,
        credentials: &Credentials,
    ) -> Result<Authorization, PushError> {
        let basic = STANDARD.encode(format!("{}:{}", credentials.username, credentials.password));
        let Some(params) = strip_scheme(challenge, "Bearer") else {
            return Ok(Authorization::Basic(basic));
        };
        let params = challenge_params(params);
        let realm = params
            .iter()
            .find(|(k, _)| k == "realm")
            .map(|(_, v)| v.clone())
            .ok_or_else(|| {
                PushError::Unreachable(
                    self.reference.registry.clone(),
                    format!("a Bearer challenge without a realm: {challenge}"),
                )
            })?;
        let mut query = vec![(
            "scope".to_owned(),
            format!("repository:{}:pull,push", self.reference.repository),
        )];
        if let Some((_, service)) = params.iter().find(|(k, _)| k == "service") {
            query.push(("service".to_owned(), service.clone()));
        }
        let query: Vec<String> = query
            .iter()
            .map(|(k, v)| format!("{k}={}", crate::text::percent_encode(v)))
            .collect();
        let url = format!(
            "{realm}{}{}",
            if realm.contains('?') { '&' } else { '?' },
            query.join("&")
        );
        let answer = self
            .request(
                Method::GET,
                &url,
                None,
                &[(header::AUTHORIZATION, format!("Basic {basic}"))],
                REQUEST_TIMEOUT,
            )
            .await?;
        self.refused_unless_ok(&answer, credentials)?;
        let document: serde_json::Value = serde_json::from_slice(&answer.body)
            .map_err(|_| self.unexpected("the token request", &answer))?;
        let token = document["token"]
            .as_str()
            .or_else(|| document["access_token"].as_str())
            .ok_or_else(|| self.unexpected("the token request", &answer))?;
        Ok(Authorization::Bearer(token.to_owned()))
    }

    fn refused_unless_ok(
        &self,
        answer: &Answer,
        credentials: &Credentials,
    ) -> Result<(), PushError> {
        match answer.status {
            s if s.is_success() => Ok(()),
            s @ (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) => Err(PushError::Refused {
                registry: self.reference.registry.clone(),
                username: credentials.username.clone(),
                status: s,
            }),
            _ => Err(self.unexpected("the login", answer)),
        }
    }

    fn unexpected(&self, what: &str, answer: &Answer) -> PushError {
        PushError::Unexpected {
            registry: self.reference.registry.clone(),
            what: what.to_owned(),
            status: answer.status,
            body: answer.text(),
        }
    }

    /// Pushes `image` under the reference's tag; the manifest's digest as the registry has it.
    pub async fn push(&self, image: &Image) -> Result<String, PushError> {
        self.upload(image).await?;
        let tag = self.reference.tag.clone();
        self.put_manifest(&tag, image.manifest.media_type, &image.manifest.bytes)
            .await?;
        Ok(image.digest())
    }

    /// Pushes `image` and makes the tag an image index holding it beside the other platforms' images
    /// the tag already names (an index, or one image of another platform); an image of the same
    /// platform is replaced. The index's digest: one reference for every platform. Pushes to one tag
    /// must not overlap (the index is read, then written).
    pub async fn push_into_index(&self, image: &Image) -> Result<String, PushError> {
        self.upload(image).await?;
        let digest = image.digest();
        self.put_manifest(&digest, image.manifest.media_type, &image.manifest.bytes)
            .await?;
        let mut entries = self.platform_entries().await?;
        let ours = image.index_entry();
        entries.retain(|entry| entry["platform"] != ours["platform"]);
        entries.push(ours);
        entries.sort_by_key(|e| e["platform"].to_string());
        let index = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": INDEX_MEDIA_TYPE,
            "manifests": entries,
        }))
        .expect("an index serializes");
        let tag = self.reference.tag.clone();
        self.put_manifest(&tag, INDEX_MEDIA_TYPE, &index).await?;
        Ok(sha256(&index))
    }

    /// The images the tag names now, as index entries with their platforms: none for a tag that
    /// does not exist, an index's own entries, or the one image's descriptor with the platform its
    /// config names.
    async fn platform_entries(&self) -> Result<Vec<serde_json::Value>, PushError> {
        let repository = &self.reference.repository;
        let path = format!("/v2/{repository}/manifests/{}", self.reference.tag);
        let accept = [(header::ACCEPT, MANIFEST_TYPES.join(", "))];
        let answer = self.send(Method::GET, &path, None, &accept).await?;
        if answer.status == StatusCode::NOT_FOUND {
            return Ok(Vec::new());
        }
        if answer.status != StatusCode::OK {
            return Err(self.unexpected(&format!("GET {path}"), &answer));
        }
        let document: serde_json::Value = serde_json::from_slice(&answer.body)
            .map_err(|_| self.unexpected(&format!("GET {path}"), &answer))?;
        if let Some(entries) = document["manifests"].as_array() {
            return Ok(entries.clone());
        }
        let config_digest = document["config"]["digest"].as_str().unwrap_or_default();
        let config_path = format!("/v2/{repository}/blobs/{config_digest}");
        let config = self.get_blob(&config_path).await?;
        let config: serde_json::Value = serde_json::from_slice(&config.body)
            .map_err(|_| self.unexpected(&format!("GET {config_path}"), &config))?;
        let media_type = answer
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or(MANIFEST_MEDIA_TYPE)
            .to_owned();
        Ok(vec![serde_json::json!({
            "mediaType": media_type,
            "digest": sha256(&answer.body),
            "size": answer.body.len(),
            "platform": {"architecture": config["architecture"], "os": config["os"]},
        })])
    }

    /// GET of a blob, following the redirect to storage many registries answer with (GHCR, ECR, a
    /// distribution on S3); the redirect's host gets no credentials of ours.
    async fn get_blob(&self, path: &str) -> Result<Answer, PushError> {
        let answer = self.send(Method::GET, path, None, &[]).await?;
        let location = answer
            .headers
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .filter(|_| answer.status.is_redirection());
        match location {
            Some(location) => {
                let url = match location.starts_with('/') {
                    true => format!("{}{location}", self.base),
                    false => location.to_owned(),
                };
                self.request(Method::GET, &url, None, &[], REQUEST_TIMEOUT)
                    .await
            }
            None => Ok(answer),
        }
    }

    async fn upload(&self, image: &Image) -> Result<(), PushError> {
        for blob in [&image.layer, &image.config] {
            self.upload_unless_present(blob).await?;
        }
        Ok(())
    }

    /// PUT of a manifest (or an index) under `reference`, a tag or its digest.
    async fn put_manifest(
        &self,
        reference: &str,
        media_type: &str,
        bytes: &[u8],
    ) -> Result<(), PushError> {
        let path = format!("/v2/{}/manifests/{reference}", self.reference.repository);
        let content_type = [(header::CONTENT_TYPE, media_type.to_owned())];
        let answer = self
            .send(Method::PUT, &path, Some(bytes), &content_type)
            .await?;
        if answer.status != StatusCode::CREATED {
            return Err(self.unexpected(&format!("PUT {path}"), &answer));
        }
        let pushed = sha256(bytes);
        match answer
            .headers
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
        {
            Some(stored) if stored != pushed => Err(PushError::DigestMismatch(
                self.reference.registry.clone(),
                stored.to_owned(),
                pushed,
            )),
            _ => Ok(()),
        }
    }

    async fn upload_unless_present(&self, blob: &Blob) -> Result<(), PushError> {
        let digest = blob.digest();
        let repository = &self.reference.repository;
        let blob_path = format!("/v2/{repository}/blobs/{digest}");
        let head = self.send(Method::HEAD, &blob_path, None, &[]).await?;
        if head.status == StatusCode::OK {
            return Ok(());
        }
        let start_path = format!("/v2/{repository}/blobs/uploads/");
        let started = self.send(Method::POST, &start_path, Some(&[]), &[]).await?;
        let location = started
            .headers
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .filter(|_| started.status == StatusCode::ACCEPTED)
            .ok_or_else(|| self.unexpected(&format!("POST {start_path}"), &started))?;
        // The location may be absolute or a path, and may carry its own query (an upload state).
        let mut url = if location.starts_with('/') {
            format!("{}{location}", self.base)
        } else {
            location.to_owned()
        };
        url.push(if url.contains('?') { '&' } else { '?' });
        url.push_str(&format!("digest={}", crate::text::percent_encode(&digest)));
        let headers = [(header::CONTENT_TYPE, "application/octet-stream".to_owned())];
        let answer = self
            .request(
                Method::PUT,
                &url,
                Some(&blob.bytes),
                &headers,
                UPLOAD_TIMEOUT,
            )
            .await?;
        if answer.status != StatusCode::CREATED {
            return Err(self.unexpected(&format!("PUT the blob {digest}"), &answer));
        }
        Ok(())
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&[u8]>,
        headers: &[(header::HeaderName, String)],
    ) -> Result<Answer, PushError> {
        let url = format!("{}{path}", self.base);
        self.request(method, &url, body, headers, REQUEST_TIMEOUT)
            .await
    }

    async fn request(
        &self,
        method: Method,
        url: &str,
        body: Option<&[u8]>,
        headers: &[(header::HeaderName, String)],
        timeout: Duration,
    ) -> Result<Answer, PushError> {
        let unreachable = |e: String| PushError::Unreachable(self.reference.registry.clone(), e);
        let mut builder = Request::builder().method(method).uri(url).header(
            header::USER_AGENT,
            concat!("sentry-tenants/", env!("CARGO_PKG_VERSION")),
        );
        // The token goes only to the registry itself, never to a realm on another host.
        if url.starts_with(&self.base) {
            match &self.authorization {
                Authorization::None => {}
                Authorization::Basic(b) => {
                    builder = builder.header(header::AUTHORIZATION, format!("Basic {b}"))
                }
                Authorization::Bearer(t) => {
                    builder = builder.header(header::AUTHORIZATION, format!("Bearer {t}"))
                }
            }
        }
        for (name, value) in headers {
            builder = builder.header(name, value);
        }
        let body = Full::new(Bytes::copy_from_slice(body.unwrap_or_default()));
        let request = builder.body(body).map_err(|e| unreachable(e.to_string()))?;
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| unreachable(with_causes(&e)))?;
            let (parts, body) = response.into_parts();
            let body = http_body_util::Limited::new(body, crate::image::MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| unreachable(format!("reading the answer: {e}")))?
                .to_bytes();
            Ok(Answer {
                status: parts.status,
                headers: parts.headers,
                body,
            })
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| unreachable(format!("no answer within {} s", timeout.as_secs())))?
    }
}

/// An error with its causes, and the likely fix when TLS met a plain-HTTP server.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        message = format!("{message}: {cause}");
        source = cause.source();
    }
    if message.contains("InvalidContentType") {
        message.push_str(" (is it a plain-HTTP registry? then --plain-http)");
    }
    message
}

/// The parameters of a challenge, after its scheme, if it is `scheme` (case-insensitive).
fn strip_scheme<'a>(challenge: &'a str, scheme: &str) -> Option<&'a str> {
    let (first, rest) = challenge.trim().split_once(' ')?;
    first.eq_ignore_ascii_case(scheme).then_some(rest)
}

/// `realm="https://auth.example.com/token",service="registry",scope="a,b"` → its pairs, quoted
/// values unquoted (commas inside quotes kept).
fn challenge_params(params: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = params.trim();
    while let Some((key, after)) = rest.split_once('=') {
        let key = key
            .trim()
            .trim_start_matches(',')
            .trim()
            .to_ascii_lowercase();
        let (value, next) = match after.strip_prefix('"') {
            Some(quoted) => match quoted.split_once('"') {
                Some((value, next)) => (value, next),
                None => (quoted, ""),
            },
            None => after.split_once(',').unwrap_or((after, "")),
        };
        out.push((key, value.to_owned()));
        rest = next.trim_start_matches(',').trim();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_names_its_registry_and_defaults_its_tag_to_the_version() {
        let r = Reference::parse("registry.example.com:5000/team/sentry-tenants").unwrap();
        assert_eq!(r.registry, "registry.example.com:5000");
        assert_eq!(r.repository, "team/sentry-tenants");
        assert_eq!(r.tag, format!("v{}", env!("CARGO_PKG_VERSION")));
        let r = Reference::parse("localhost/st:dev").unwrap();
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str(), r.tag.as_str()),
            ("localhost", "st", "dev")
        );
        assert_eq!(
            Reference::parse("docker.io/team/st:v1").unwrap().api_host(),
            "registry-1.docker.io"
        );
        assert_eq!(
            Reference::parse("r.example.com/a/b:t")
                .unwrap()
                .by_digest("sha256:ab"),
            "r.example.com/a/b@sha256:ab"
        );
        for bad in [
            "team/sentry-tenants",
            "sentry-tenants",
            "r.example.com/",
            "r.example.com/a@sha256:ab",
            "R.example.com/A",
        ] {
            assert!(Reference::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_bearer_challenge_gives_its_realm_service_and_scope() {
        let challenge = r#"Bearer realm="https://auth.example.com/token",service="registry.example.com",scope="repository:a/b:pull,push""#;
        let params = challenge_params(strip_scheme(challenge, "bearer").unwrap());
        assert_eq!(
            params,
            [
                (
                    "realm".to_owned(),
                    "https://auth.example.com/token".to_owned()
                ),
                ("service".to_owned(), "registry.example.com".to_owned()),
                ("scope".to_owned(), "repository:a/b:pull,push".to_owned()),
            ]
        );
        assert_eq!(
            strip_scheme(r#"Basic realm="Registry Realm""#, "Bearer"),
            None
        );
        assert_eq!(
            challenge_params("realm=plain, service=x"),
            [
                ("realm".to_owned(), "plain".to_owned()),
                ("service".to_owned(), "x".to_owned())
            ]
        );
    }

    #[test]
    fn credentials_never_print_their_password() {
        let c = Credentials {
            username: "ci".into(),
            password: "s3cret".into(),
        };
        assert!(!format!("{c:?}").contains("s3cret"));
    }
}
