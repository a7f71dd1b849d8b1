//! Files Writ's processes write that others read while they run (keys, certificates, env and
//! config files).

use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Replaces `path` with `text` atomically: written beside it as `<path>.next` (0600 when
/// `private`, else 0644), synced, then renamed over it — a reader sees the old file or the new
/// one, never a part.
pub fn replace(path: &Path, text: &str, private: bool) -> io::Result<()> {
    replace_with(path, private, |f| f.write_all(text.as_bytes()))
}

/// [`replace`] with the new contents written by `write` (buffered), for files too large to
/// build in memory first.
pub fn replace_with(
    path: &Path,
    private: bool,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    let mut next = path.as_os_str().to_owned();
    next.push(".next");
    let next = std::path::PathBuf::from(next);
    let _ = std::fs::remove_file(&next);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if private { 0o600 } else { 0o644 })
        .open(&next)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", next.display())))?;
    let mut w = io::BufWriter::new(f);
    write(&mut w)?;
    w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    std::fs::rename(&next, path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    #[test]
    fn replaces_atomically_with_the_mode_asked() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("writ-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("key.pem");
        super::replace(&path, "one", true).unwrap();
        super::replace(&path, "two", true).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "two");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert!(!dir.join("key.pem.next").exists());
        super::replace(&path, "three", false).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o644);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
