//! The operator's image, made from the running binary: `sentry-tenants image export` writes it as an
//! image archive and `image push` sends it to a registry, so a cluster that cannot pull the published
//! image — air-gapped, or with only its own registry — still runs the operator, with no Docker and no
//! build. Same binary, same digest.

pub mod archive;
pub mod credentials;
pub mod registry;
pub mod rootfs;

use std::io::Write;
use std::path::PathBuf;

pub use archive::Image;

#[derive(clap::Subcommand, Debug)]
pub enum ImageCommand {
    /// Write the operator image, made from this binary, as an OCI image archive:
    /// `ctr -n k8s.io images import FILE`, `kind load image-archive FILE`, `podman load -i FILE`.
    Export(ExportArgs),
    /// Push the operator image, made from this binary, to a registry; prints it by digest.
    Push(PushArgs),
}

#[derive(clap::Args, Debug)]
pub struct PushArgs {
    /// Where to push: `registry[:port]/repository[:tag]` (the tag defaults to this binary's version).
    #[arg(value_name = "REPOSITORY[:TAG]")]
    pub reference: String,
    /// Make the tag an image index: this platform's image beside those of other platforms the tag
    /// already names (push from each architecture's binary in turn for one multi-arch tag).
    #[arg(long)]
    pub index: bool,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// How to reach and log in to a registry (`image push`, `install --push-image`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RegistryArgs {
    /// The registry user; the password is read from stdin (`--password-stdin`). Without it, the
    /// credentials `docker login`/`podman login` stored (REGISTRY_AUTH_FILE, ~/.docker/config.json).
    #[arg(
        long = "registry-username",
        visible_alias = "username",
        value_name = "USER",
        requires = "password_stdin"
    )]
    pub username: Option<String>,
    /// Read the registry password from stdin's first line.
    #[arg(
        long = "registry-password-stdin",
        visible_alias = "password-stdin",
        requires = "username"
    )]
    pub password_stdin: bool,
    /// Verify the registry's TLS certificate against this PEM bundle only (a private CA) instead of
    /// the system's roots.
    #[arg(long, value_name = "FILE")]
    pub registry_ca: Option<PathBuf>,
    /// Speak plain HTTP to the registry (a local one without TLS).
    #[arg(long)]
    pub plain_http: bool,
}

#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// The archive to write; `-` writes it to standard output (`-o - | ctr -n k8s.io images import -`).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,
    /// The name the archive gives the image, which `install --image` then names: the default is the
    /// image `install` runs unless told otherwise, so an imported archive needs no `--image`.
    #[arg(long, value_name = "REPOSITORY:TAG", default_value = crate::DEFAULT_IMAGE)]
    pub tag: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error(transparent)]
    Value(#[from] crate::flags::ValueError),
    #[error("reading {0}: {1}")]
    Read(PathBuf, std::io::Error),
    #[error(
        "this binary is not a 64-bit little-endian ELF executable: image export makes Linux images for x86-64 and arm64"
    )]
    NotElf64,
    #[error("writing the archive: {0}")]
    Write(#[from] std::io::Error),
    #[error(
        "{0:?} is not where to push: registry[:port]/repository[:tag], the registry first (docker.io/team/sentry-tenants for Docker Hub), lowercase, no @digest"
    )]
    Reference(String),
    #[error("{0}: {1}")]
    AuthFile(PathBuf, String),
    #[error(
        "{0} keeps the credentials for {1} in a credential helper (docker-credential-{2}), which image push does not run: give --username and --password-stdin"
    )]
    CredentialHelper(PathBuf, String, String),
    #[error("--password-stdin read an empty password")]
    EmptyPassword,
    #[error("--registry-ca {0}: {1}")]
    RegistryCa(PathBuf, String),
    #[error("{0} (or give the registry's CA with --registry-ca)")]
    SystemRoots(String),
    #[error(transparent)]
    Push(#[from] registry::PushError),
}

/// The largest answer a registry gives us that is read (errors, tokens): anything larger is not
/// an answer to our requests.
pub const MAX_ANSWER: usize = 1 << 20;

pub async fn run(command: ImageCommand) -> anyhow::Result<()> {
    match command {
        ImageCommand::Export(args) => export(&args),
        ImageCommand::Push(args) => {
            let reference = registry::Reference::parse(&args.reference)?;
            let pushed = push(&reference, &args.registry, args.index).await?;
            println!("{pushed}");
            Ok(())
        }
    }
}

/// Pushes the image of this binary to `reference` (into the tag's index with `into_index`); the
/// image (or the index) by digest.
pub async fn push(
    reference: &registry::Reference,
    args: &RegistryArgs,
    into_index: bool,
) -> Result<String, ImageError> {
    let credentials = match &args.username {
        Some(username) => Some(registry::Credentials {
            username: username.clone(),
            password: credentials::password_from(std::io::stdin().lock())?,
        }),
        None => {
            let files = credentials::auth_files(|k| std::env::var(k).ok());
            credentials::from_auth_files(&files, &reference.registry)?
        }
    };
    let connector = match &args.registry_ca {
        Some(file) => {
            let pem = std::fs::read(file).map_err(|e| ImageError::Read(file.clone(), e))?;
            crate::tls::with_ca_bundle(&pem).map_err(|e| ImageError::RegistryCa(file.clone(), e))?
        }
        None => crate::tls::with_system_roots().map_err(ImageError::SystemRoots)?,
    };
    // Made before anything reaches the network: a dynamically linked binary's image takes the
    // libraries this process has mapped, and a name lookup may map more (NSS modules), which would
    // make the pushed image differ from `image export`'s.
    let image = of_this_binary()?;
    let registry =
        registry::Registry::connect(reference, connector, args.plain_http, credentials.as_ref())
            .await?;
    let digest = match into_index {
        true => registry.push_into_index(&image).await?,
        false => registry.push(&image).await?,
    };
    let size = image.layer.bytes.len() as f64 / (1024.0 * 1024.0);
    eprintln!(
        "image push: {}/{}:{} ({digest}, {size:.1} MiB compressed)",
        reference.registry, reference.repository, reference.tag
    );
    Ok(reference.by_digest(&digest))
}

/// The image of the running binary.
pub fn of_this_binary() -> Result<Image, ImageError> {
    let binary =
        std::env::current_exe().map_err(|e| ImageError::Read("/proc/self/exe".into(), e))?;
    Image::build(&rootfs::tree(&binary)?)
}

fn export(args: &ExportArgs) -> anyhow::Result<()> {
    crate::flags::ValueError::check_image_tag(&args.tag)?;
    let image = of_this_binary()?;
    let to_stdout = args.output.as_os_str() == "-";
    if to_stdout {
        let stdout = std::io::stdout().lock();
        image.write_archive(&args.tag, std::io::BufWriter::new(stdout))?;
    } else {
        write_atomically(&args.output, |file| image.write_archive(&args.tag, file))?;
    }
    let size = image.layer.bytes.len() as f64 / (1024.0 * 1024.0);
    eprintln!(
        "image export: {} ({}, {size:.1} MiB compressed) → {}",
        args.tag,
        image.digest(),
        args.output.display()
    );
    if !to_stdout {
        eprintln!(
            "load it with `ctr -n k8s.io images import {0}` on each node (or `kind load image-archive {0}`), then `sentry-tenants install{1}`",
            args.output.display(),
            if args.tag == crate::DEFAULT_IMAGE {
                String::new()
            } else {
                format!(" --image {}", args.tag)
            }
        );
        // The digest alone on stdout, for scripts (`docker build -q` style).
        println!("{}", image.digest());
    }
    Ok(())
}

/// Writes `path` through a temporary file beside it, renamed into place when complete: an
/// interrupted export never leaves a truncated archive under the name a loader would read.
fn write_atomically(
    path: &std::path::Path,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> Result<(), ImageError>,
) -> Result<(), ImageError> {
    let partial = path.with_extension("partial");
    let file = std::fs::File::create(&partial).map_err(ImageError::Write)?;
    let mut out = std::io::BufWriter::new(file);
    let written = write(&mut out).and_then(|()| {
        out.flush()?;
        Ok(std::fs::rename(&partial, path)?)
    });
    if written.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    written
}
