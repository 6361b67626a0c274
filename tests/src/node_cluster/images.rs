//! The node cluster's images: built once by `scripts/node-images` (pause from
//! `tests/node/pause/pause.c`, CoreDNS from [`COREDNS`], busybox from Debian's
//! `busybox-static`) into `target/node-images/images/`, with the stamp, lock and
//! failure-marker scheme of [`ensure_artifact`].

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::envtest::build::{
    Artifact, COREDNS, ensure_artifact, run_logged, stamp_of, stamp_of_text, workspace,
};
use crate::skip::Skip;

/// The pause (sandbox) image's reference, as `scripts/node-images` names it.
pub const PAUSE: &str = "svcplane.test/pause:1";
/// The CoreDNS image's reference.
pub const COREDNS_IMAGE: &str = "svcplane.test/coredns:1.15.0";
/// The busybox test-app image's reference: `httpd` for a server, `wget` and
/// `nslookup` for a client, `sh`, `timeout` and the usual applets. Debian's busybox
/// 1.35 crashes on `wget -T SECONDS`: bound it with `timeout SECONDS wget ...`.
pub const BUSYBOX: &str = "svcplane.test/busybox:1";

/// The three image archives (OCI layouts as tar files, ready for `ctr images import`).
#[derive(Debug, Clone)]
pub struct ImageArchives {
    pub pause: PathBuf,
    pub coredns: PathBuf,
    pub busybox: PathBuf,
}

/// Builds the images unless current; the reason to skip otherwise.
pub fn ensure() -> Result<ImageArchives, Skip> {
    let coredns = COREDNS.binary()?;
    let root = workspace();
    let mut stamp = String::new();
    for input in [
        "scripts/node-images",
        "scripts/oci_image.py",
        "tests/node/pause",
    ] {
        let part = stamp_of(&root.join(input), &[]).map_err(|e| {
            Skip::missing(
                format!("cannot read {input}: {e}"),
                format!("restore {input} from the repository"),
            )
        })?;
        stamp.push_str(&part);
    }
    // The CoreDNS binary's own stamp: a rebuilt CoreDNS gives a new image.
    stamp.push_str(&COREDNS.stamp().unwrap_or_default());
    let stamp = stamp_of_text(&stamp);
    let dir = root.join("target").join("node-images");
    let artifact = Artifact {
        name: "node-images",
        output: dir.join("images"),
        stamp,
        what: "the node cluster's images (scripts/node-images: pause, CoreDNS, busybox)",
        enable: "install gcc, libc6-dev and python3 and make Debian's mirrors reachable \
                 (busybox-static is downloaded with apt-get), then run `scripts/test` again",
    };
    let out = ensure_artifact(&artifact, |tmp, log| {
        let mut cmd = Command::new(root.join("scripts/node-images"));
        cmd.arg(tmp).arg(&coredns);
        run_logged(cmd, log, "node-images")
    })?;
    Ok(archives(&out))
}

fn archives(dir: &Path) -> ImageArchives {
    ImageArchives {
        pause: dir.join("pause.oci.tar"),
        coredns: dir.join("coredns.oci.tar"),
        busybox: dir.join("busybox.oci.tar"),
    }
}
