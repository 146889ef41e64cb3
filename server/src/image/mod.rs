//! The operator's image, made from the running binary: `sentry-tenants image export` writes it as an
//! image archive, so a cluster that cannot pull the published image — air-gapped, or with only its own
//! registry — still runs the operator, with no Docker and no build. Same binary, same digest.

pub mod archive;
pub mod rootfs;

use std::io::Write;
use std::path::PathBuf;

pub use archive::Image;

#[derive(clap::Subcommand, Debug)]
pub enum ImageCommand {
    /// Write the operator image, made from this binary, as an OCI image archive:
    /// `ctr -n k8s.io images import FILE`, `kind load image-archive FILE`, `podman load -i FILE`.
    Export(ExportArgs),
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
}

pub fn run(command: ImageCommand) -> anyhow::Result<()> {
    match command {
        ImageCommand::Export(args) => export(&args),
    }
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
