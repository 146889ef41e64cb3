//! Debian's real `clickhouse-server` (18.16), started for a test with a throwaway config (on 127.0.0.1,
//! or on the cluster bridge's address for pods to reach), and stopped when the handle drops.

use std::path::PathBuf;

use crate::free_port;
use std::process::{Command, Stdio};

use crate::processes::Owned;
use std::time::{Duration, Instant};

pub const BINARY: &str = "/usr/sbin/clickhouse-server";
pub const ADMIN: &str = "admin";
pub const ADMIN_PASSWORD: &str = "adm1n-s3cret";

pub struct ClickHouseServer {
    child: Option<Owned>,
    dir: PathBuf,
    pub http_port: u16,
    pub host: String,
}

impl ClickHouseServer {
    pub fn start() -> Self {
        Self::start_on("127.0.0.1")
    }

    /// Listening on `host`, accepting the admin from anywhere on this machine's networks. A port
    /// picked free can be taken by another test before the server binds it; the server then exits
    /// saying so, and is started again on other ports.
    pub fn start_on(host: &str) -> Self {
        assert!(
            std::path::Path::new(BINARY).exists(),
            "{BINARY} is missing: run `bash scripts/setup.sh` (it installs Debian's clickhouse-server)"
        );
        for _ in 0..5 {
            let mut server = Self::launch(host);
            match server.wait_until_up() {
                Ok(()) => return server,
                Err(log) if log.contains("Address already in use") => continue,
                Err(log) => panic!("clickhouse-server did not come up; error.log:\n{log}"),
            }
        }
        panic!("clickhouse-server found its ports taken five times in a row");
    }

    fn launch(host: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "sentry-tenants-ch-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(dir.join("data/tmp")).unwrap();
        let (http_port, tcp_port) = (free_port(), free_port());
        let networks = if host == "127.0.0.1" {
            "<ip>127.0.0.1</ip>".to_owned()
        } else {
            format!("<ip>127.0.0.1</ip><ip>{host}/24</ip>")
        };
        let d = dir.display();
        std::fs::write(
            dir.join("config.xml"),
            format!(
                r#"<?xml version="1.0"?>
<yandex>
    <logger><level>warning</level><log>{d}/server.log</log><errorlog>{d}/error.log</errorlog><console>0</console></logger>
    <http_port>{http_port}</http_port>
    <tcp_port>{tcp_port}</tcp_port>
    <listen_host>{host}</listen_host>
    <path>{d}/data/</path>
    <tmp_path>{d}/data/tmp/</tmp_path>
    <user_files_path>{d}/data/user_files/</user_files_path>
    <format_schema_path>{d}/data/format_schemas/</format_schema_path>
    <users_config>{d}/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <mark_cache_size>536870912</mark_cache_size>
</yandex>
"#
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join("users.xml"),
            format!(
                r#"<?xml version="1.0"?>
<yandex>
    <profiles><default></default></profiles>
    <users>
        <{ADMIN}>
            <password>{ADMIN_PASSWORD}</password>
            <networks>{networks}</networks>
            <profile>default</profile>
            <quota>default</quota>
        </{ADMIN}>
    </users>
    <quotas><default></default></quotas>
</yandex>
"#
            ),
        )
        .unwrap();
        let child = Owned::spawn(
            Command::new(BINARY)
                .arg(format!(
                    "--config-file={}",
                    dir.join("config.xml").display()
                ))
                .current_dir(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )
        .expect("start clickhouse-server");
        Self {
            child: Some(child),
            dir,
            http_port,
            host: host.to_owned(),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}:{}", self.host, self.http_port)
    }

    /// Waits for `/ping` to answer; the server's error log if it exited (or never answered).
    fn wait_until_up(&mut self) -> Result<(), String> {
        let log = |dir: &std::path::Path| {
            std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(mut s) = std::net::TcpStream::connect((self.host.as_str(), self.http_port)) {
                use std::io::{Read, Write};
                let _ = s.write_all(b"GET /ping HTTP/1.0\r\n\r\n");
                let mut out = String::new();
                let _ = s.read_to_string(&mut out);
                if out.ends_with("Ok.\n") {
                    return Ok(());
                }
            }
            if matches!(
                self.child.as_mut().map(|c| c.child_mut().try_wait()),
                Some(Ok(Some(_)))
            ) {
                return Err(log(&self.dir));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!("(no answer within 60 s)\n{}", log(&self.dir)))
    }
}

impl Drop for ClickHouseServer {
    fn drop(&mut self) {
        drop(self.child.take()); // the server gone before its data directory
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
