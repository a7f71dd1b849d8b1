//! The deployment files in `deploy/` are checked by the tools their users run: the systemd
//! units by `systemd-analyze verify` (no warning) and `systemd-analyze security` (exposure),
//! the Kubernetes manifests by `kubernetes-validate --strict` against a pinned Kubernetes
//! version, and the Writ configurations the manifests carry by `writ node|edge --check`.

use std::path::{Path, PathBuf};
use std::process::Command;

use writ_tests::procs::writ_bin;

/// The Kubernetes version the manifests are validated against.
const KUBERNETES_VERSION: &str = "1.33.0";
/// Highest `systemd-analyze security` exposure a unit may have ("OK" is below 2.0 on its scale).
const EXPOSURE_MAX: f64 = 2.0;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn run(cmd: &mut Command) -> (bool, String, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

/// The files of `deploy/<sub>` ending in `.<ext>`, sorted.
fn files_in(sub: &str, ext: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(deploy_dir().join(sub))
        .unwrap_or_else(|e| panic!("deploy/{sub}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    files.sort();
    files
}

fn units() -> Vec<PathBuf> {
    files_in("systemd", "service")
}

#[test]
fn systemd_units_verify_and_are_hardened() {
    let units = units();
    let names: Vec<String> = units.iter().map(|u| u.file_name().unwrap().to_string_lossy().into()).collect();
    assert_eq!(names, ["writ-edge.service", "writ-executor.service", "writ-node.service"]);
    // verify checks that ExecStart's binary exists: the copies name the binary just built.
    let dir = tempfile::tempdir().unwrap();
    for unit in &units {
        let text = std::fs::read_to_string(unit).unwrap();
        assert!(text.contains("ExecStart=/usr/local/bin/writ "), "{}", unit.display());
        let copy = dir.path().join(unit.file_name().unwrap());
        std::fs::write(&copy, text.replace("/usr/local/bin/writ", &writ_bin().display().to_string())).unwrap();
        let (ok, out, err) = run(Command::new("systemd-analyze").arg("verify").arg(&copy));
        // systemd-analyze exits 0 on unknown keys and bad values; its warnings are the findings.
        assert!(ok && err.trim().is_empty(), "{}: {out}{err}", unit.display());
        let (_, out, err) = run(Command::new("systemd-analyze").args(["security", "--offline=yes"]).arg(&copy));
        let exposure: f64 = out
            .lines()
            .chain(err.lines())
            .find_map(|l| {
                l.split("Overall exposure level for").nth(1)?.split(':').nth(1)?.split_whitespace().next()?.parse().ok()
            })
            .unwrap_or_else(|| panic!("no exposure level in: {out}{err}"));
        assert!(exposure <= EXPOSURE_MAX, "{}: exposure {exposure} > {EXPOSURE_MAX}", unit.display());
    }
    // A unit with a mistake does not pass (the check can fail).
    let bad = dir.path().join("bad.service");
    let text = std::fs::read_to_string(&units[2]).unwrap().replace("ProtectSystem=strict", "ProtectSystem=banana");
    std::fs::write(&bad, text.replace("/usr/local/bin/writ", &writ_bin().display().to_string())).unwrap();
    let (_, _, err) = run(Command::new("systemd-analyze").arg("verify").arg(&bad));
    assert!(err.contains("banana"), "{err}");
}

fn manifests() -> Vec<PathBuf> {
    files_in("kubernetes", "yaml")
}

#[test]
fn kubernetes_manifests_validate_strictly() {
    let files = manifests();
    assert!(files.len() >= 4, "{files:?}");
    let (ok, out, err) =
        run(Command::new("kubernetes-validate").args(["--strict", "--quiet", "-k", KUBERNETES_VERSION]).args(&files));
    assert!(ok, "{out}{err}");
    // What the manifests must hold for the roles' paths (issue: StatefulSet, headless peer
    // Service, PodDisruptionBudget, Deployment probed on the probe listener, NetworkPolicies).
    let all: String = files.iter().map(|f| std::fs::read_to_string(f).unwrap()).collect();
    for needle in [
        "kind: StatefulSet",
        "clusterIP: None",
        "kind: PodDisruptionBudget",
        "kind: Deployment",
        "port: probe",
        "kind: NetworkPolicy",
        "kind: Secret",
    ] {
        assert!(all.contains(needle), "the manifests lack {needle}");
    }
    // The check can fail: a misspelt field is refused.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        std::fs::read_to_string(deploy_dir().join("kubernetes/20-nodes.yaml"))
            .unwrap()
            .replace("replicas: 3", "replicaz: 3"),
    )
    .unwrap();
    let (ok, _, _) =
        run(Command::new("kubernetes-validate").args(["--strict", "--quiet", "-k", KUBERNETES_VERSION]).arg(&bad));
    assert!(!ok, "a misspelt field must not validate");
}

/// Every Writ configuration inside a ConfigMap is one `writ node|edge --check` accepts (each
/// node id of the StatefulSet).
#[test]
fn configurations_in_the_manifests_are_valid() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"
import sys, yaml, pathlib
out = pathlib.Path(sys.argv[1])
for f in sys.argv[2:]:
    for doc in yaml.safe_load_all(open(f)):
        if doc and doc.get("kind") == "ConfigMap":
            for key, text in doc["data"].items():
                (out / key).write_text(text)
"#;
    let (ok, out, err) = run(Command::new("python3").arg("-c").arg(script).arg(dir.path()).args(manifests()));
    assert!(ok, "{out}{err}");
    for id in ["1", "2", "3"] {
        let (ok, out, err) = run(Command::new(writ_bin())
            .args(["node", "--check", "--config"])
            .arg(dir.path().join("node.toml"))
            .env("WRIT_NODE_ID", id)
            .env("WRIT_OPERATOR_TOKEN", "0123456789abcdef0123"));
        assert!(ok, "node {id}: {out}{err}");
        assert!(out.contains(&format!("node {id}")), "{out}");
    }
    let (ok, out, err) =
        run(Command::new(writ_bin()).args(["edge", "--check", "--config"]).arg(dir.path().join("edge.toml")));
    assert!(ok, "{out}{err}");
}

/// `deploy/image/build.sh` makes an OCI image without any base image: the layout's digests and
/// sizes agree with its blobs, the manifest names an OCI config and one gzip layer, and the
/// layer's files are complete — the binary runs chrooted into them (`writ --version`).
#[test]
fn the_oci_image_is_well_formed_and_complete() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("image");
    let (ok, stdout, err) =
        run(Command::new(deploy_dir().join("image/build.sh")).arg(writ_bin()).arg(&out).env("WRIT_IMAGE_TAG", "test"));
    assert!(ok, "{stdout}{err}");
    let layout = out.join("layout");
    let blob = |digest: &str| {
        let hex = digest.strip_prefix("sha256:").expect("sha256 digest");
        let path = layout.join("blobs/sha256").join(hex);
        let (ok, sum, _) = run(Command::new("sha256sum").arg(&path));
        assert!(ok && sum.starts_with(hex), "{digest}: the blob's content does not hash to its name");
        std::fs::read(&path).unwrap()
    };
    let json = |bytes: Vec<u8>| serde_json::from_slice::<serde_json::Value>(&bytes).unwrap();
    assert_eq!(json(std::fs::read(layout.join("oci-layout")).unwrap())["imageLayoutVersion"], "1.0.0");
    let index = json(std::fs::read(layout.join("index.json")).unwrap());
    let entry = &index["manifests"][0];
    assert_eq!(entry["annotations"]["org.opencontainers.image.ref.name"], "test");
    let manifest_bytes = blob(entry["digest"].as_str().unwrap());
    assert_eq!(entry["size"].as_u64(), Some(manifest_bytes.len() as u64));
    let manifest = json(manifest_bytes);
    assert_eq!(manifest["config"]["mediaType"], "application/vnd.oci.image.config.v1+json");
    let config_bytes = blob(manifest["config"]["digest"].as_str().unwrap());
    assert_eq!(manifest["config"]["size"].as_u64(), Some(config_bytes.len() as u64));
    let config = json(config_bytes);
    assert_eq!(config["config"]["User"], "10001:10001", "the image runs unprivileged");
    assert_eq!(config["config"]["Entrypoint"][0], "/usr/local/bin/writ");
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1);
    assert_eq!(layers[0]["mediaType"], "application/vnd.oci.image.layer.v1.tar+gzip");
    let layer = blob(layers[0]["digest"].as_str().unwrap());
    assert_eq!(layers[0]["size"].as_u64(), Some(layer.len() as u64));
    assert!(config["rootfs"]["diff_ids"][0].as_str().unwrap().starts_with("sha256:"));
    // Everything the binary links is in the layer: it runs with the rootfs as its whole world.
    let (ok, version, err) =
        run(Command::new("chroot").arg(out.join("rootfs")).args(["/usr/local/bin/writ", "--version"]));
    assert!(ok && version.starts_with("writ "), "{version}{err}");
}
