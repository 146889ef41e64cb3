//! Registry credentials where `docker login`, `podman login` and `skopeo login` leave them, or from
//! the command line (`--username` with the password on stdin, never in an argument `ps` shows).

use std::path::PathBuf;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::ImageError;
use super::registry::Credentials;

/// The auth files to read, first found first: `REGISTRY_AUTH_FILE` (podman, skopeo), podman's
/// runtime file, then Docker's (`DOCKER_CONFIG` or `~/.docker`).
pub fn auth_files(env: impl Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let mut files = Vec::new();
    if let Some(file) = env("REGISTRY_AUTH_FILE") {
        files.push(PathBuf::from(file));
    }
    if let Some(runtime) = env("XDG_RUNTIME_DIR") {
        files.push(PathBuf::from(runtime).join("containers/auth.json"));
    }
    match (env("DOCKER_CONFIG"), env("HOME")) {
        (Some(dir), _) => files.push(PathBuf::from(dir).join("config.json")),
        (None, Some(home)) => files.push(PathBuf::from(home).join(".docker/config.json")),
        (None, None) => {}
    }
    files
}

/// The credentials for `registry` in the first of `files` that has an entry for it; `None` when
/// none has. A file that keeps them in a credential helper is an error that says so: running
/// helpers is not done here.
pub fn from_auth_files(
    files: &[PathBuf],
    registry: &str,
) -> Result<Option<Credentials>, ImageError> {
    for file in files {
        let text = match std::fs::read_to_string(file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(ImageError::Read(file.clone(), e)),
        };
        let bad = |why: &str| ImageError::AuthFile(file.clone(), why.to_owned());
        let config: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| bad(&e.to_string()))?;
        if let Some(entry) = auth_entry(&config, registry) {
            return credentials_of(entry).map(Some).map_err(|why| bad(&why));
        }
        let helper = config["credHelpers"][registry]
            .as_str()
            .or_else(|| config["credsStore"].as_str());
        if let Some(helper) = helper {
            return Err(ImageError::CredentialHelper(
                file.clone(),
                registry.to_owned(),
                helper.to_owned(),
            ));
        }
    }
    Ok(None)
}

/// The `auths` entry for `registry`, under any of the keys the tools write it as.
fn auth_entry<'a>(config: &'a serde_json::Value, registry: &str) -> Option<&'a serde_json::Value> {
    let auths = config["auths"].as_object()?;
    let mut keys = vec![
        registry.to_owned(),
        format!("https://{registry}"),
        format!("http://{registry}"),
        format!("https://{registry}/v1/"),
        format!("https://{registry}/v2/"),
    ];
    if registry == "docker.io" {
        keys.push("https://index.docker.io/v1/".to_owned());
    }
    keys.iter().find_map(|k| auths.get(k))
}

fn credentials_of(entry: &serde_json::Value) -> Result<Credentials, String> {
    if let Some(auth) = entry["auth"].as_str().filter(|a| !a.is_empty()) {
        let decoded = STANDARD
            .decode(auth)
            .map_err(|_| "an \"auth\" that is not base64".to_owned())?;
        let decoded =
            String::from_utf8(decoded).map_err(|_| "an \"auth\" that is not UTF-8".to_owned())?;
        let (username, password) = decoded
            .split_once(':')
            .ok_or_else(|| "an \"auth\" that is not user:password".to_owned())?;
        return Ok(Credentials {
            username: username.to_owned(),
            password: password.to_owned(),
        });
    }
    match (entry["username"].as_str(), entry["password"].as_str()) {
        (Some(username), Some(password)) => Ok(Credentials {
            username: username.to_owned(),
            password: password.to_owned(),
        }),
        _ => Err("an entry with neither \"auth\" nor username and password".to_owned()),
    }
}

/// The password given on stdin: its first line, as `docker login --password-stdin` reads it.
pub fn password_from(mut stdin: impl std::io::Read) -> Result<String, ImageError> {
    let mut text = String::new();
    stdin
        .read_to_string(&mut text)
        .map_err(|e| ImageError::Read("standard input".into(), e))?;
    let password = text.lines().next().unwrap_or_default().to_owned();
    if password.is_empty() {
        return Err(ImageError::EmptyPassword);
    }
    Ok(password)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &std::path::Path, name: &str, json: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, json).unwrap();
        path
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("st-auth-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_first_file_with_an_entry_for_the_registry_gives_its_credentials() {
        let dir = scratch("first");
        // "ci:pa:ss" — a password may hold a colon; only the first one splits.
        let podman = write(
            &dir,
            "auth.json",
            r#"{"auths":{"other.example.com":{"auth":"eDp5"}}}"#,
        );
        let docker = write(
            &dir,
            "config.json",
            r#"{"auths":{"https://registry.example.com":{"auth":"Y2k6cGE6c3M="}}}"#,
        );
        let missing = dir.join("missing.json");
        let c = from_auth_files(&[missing, podman, docker], "registry.example.com")
            .unwrap()
            .unwrap();
        assert_eq!((c.username.as_str(), c.password.as_str()), ("ci", "pa:ss"));
    }

    #[test]
    fn username_and_password_fields_are_read_and_no_entry_is_none() {
        let dir = scratch("fields");
        let file = write(
            &dir,
            "auth.json",
            r#"{"auths":{"r.example.com:5000":{"username":"u","password":"p"}}}"#,
        );
        let c = from_auth_files(std::slice::from_ref(&file), "r.example.com:5000")
            .unwrap()
            .unwrap();
        assert_eq!((c.username.as_str(), c.password.as_str()), ("u", "p"));
        assert!(
            from_auth_files(&[file], "elsewhere.example.com")
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_credential_helper_or_a_broken_file_is_a_clear_error() {
        let dir = scratch("helper");
        let helper = write(
            &dir,
            "helper.json",
            r#"{"credHelpers":{"r.example.com":"ecr-login"}}"#,
        );
        let err = from_auth_files(&[helper], "r.example.com")
            .unwrap_err()
            .to_string();
        assert!(err.contains("docker-credential-ecr-login"), "{err}");
        assert!(err.contains("--username"), "{err}");
        let broken = write(
            &dir,
            "broken.json",
            r#"{"auths":{"r.example.com":{"auth":"!!"}}}"#,
        );
        let err = from_auth_files(&[broken], "r.example.com")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not base64"), "{err}");
    }

    #[test]
    fn auth_files_follow_the_tools_environment() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            auth_files(env(&[
                ("REGISTRY_AUTH_FILE", "/a.json"),
                ("XDG_RUNTIME_DIR", "/run/user/1"),
                ("HOME", "/home/u")
            ])),
            [
                "/a.json",
                "/run/user/1/containers/auth.json",
                "/home/u/.docker/config.json"
            ]
            .map(PathBuf::from)
        );
        assert_eq!(
            auth_files(env(&[
                ("DOCKER_CONFIG", "/etc/docker-ci"),
                ("HOME", "/home/u")
            ])),
            ["/etc/docker-ci/config.json"].map(PathBuf::from)
        );
    }

    #[test]
    fn the_password_is_the_first_line_of_stdin_and_may_not_be_empty() {
        assert_eq!(password_from(&b"s3cret\n"[..]).unwrap(), "s3cret");
        assert!(matches!(
            password_from(&b"\n"[..]),
            Err(ImageError::EmptyPassword)
        ));
    }
}
