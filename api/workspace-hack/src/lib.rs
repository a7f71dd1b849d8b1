//! Empty on purpose: this crate only asks cargo for the workspace's union of features (see its
//! Cargo.toml). Nothing may be exported from here.
