//! Finds libnexar and checks the header's layout.
//!
//! 1. Library: `NEXAR_LIB_DIR` (and optionally `NEXAR_INCLUDE_DIR`) if set,
//!    else `pkg-config --libs --cflags nexar` (the `PKG_CONFIG` program,
//!    honouring `PKG_CONFIG_PATH`; nexar.pc derives its prefix from where it
//!    lies, so any `cmake --install --prefix` works).
//! 2. Layout: `layout/probe.c` is compiled with the C compiler (`CC`, else
//!    `cc`) against the nexar.h found, and run; its output (sizes, offsets and
//!    constants as C sees them) becomes `$OUT_DIR/c_layout.rs`, which the unit
//!    test in `src/layout.rs` compares with the Rust declarations. A probe that
//!    cannot be built does not stop the build, but makes that test fail with
//!    the reason.
//!
//! No external crates: pkg-config and the compiler are run with
//! `std::process::Command`.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Found {
    lib_dirs: Vec<PathBuf>,
    include_dirs: Vec<PathBuf>,
    libs: Vec<String>,
}

fn main() {
    for var in [
        "PKG_CONFIG_PATH",
        "PKG_CONFIG_LIBDIR",
        "PKG_CONFIG_SYSROOT_DIR",
        "PKG_CONFIG",
        "NEXAR_LIB_DIR",
        "NEXAR_INCLUDE_DIR",
        "CC",
    ] {
        println!("cargo:rerun-if-env-changed={}", var);
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=layout/probe.c");

    let found = find_library();
    for dir in &found.lib_dirs {
        println!("cargo:rustc-link-search=native={}", dir.display());
    }
    for lib in &found.libs {
        println!("cargo:rustc-link-lib=dylib={}", lib);
    }
    // Metadata for crates that depend on this one (DEP_NEXAR_LIBDIR, ...).
    if let Some(dir) = found.lib_dirs.first() {
        println!("cargo:libdir={}", dir.display());
    }
    if let Some(dir) = found.include_dirs.first() {
        println!("cargo:include={}", dir.display());
    }

    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let layout = match probe_layout(&found, &out_dir) {
        Ok(text) => format!("pub const PROBE: Result<(), &str> = Ok(());\n{}", text),
        Err(why) => {
            println!(
                "cargo:warning=libnexar-sys: layout probe not built: {}",
                why
            );
            format!(
                "pub const PROBE: Result<(), &str> = Err({:?});\n\
                 pub const C_TYPES: &[(&str, usize, usize)] = &[];\n\
                 pub const C_FIELDS: &[(&str, usize, usize)] = &[];\n\
                 pub const C_CONSTS: &[(&str, i64)] = &[];\n\
                 pub const C_VERSION_STRING: &str = \"\";\n",
                why
            )
        }
    };
    fs::write(out_dir.join("c_layout.rs"), layout).expect("writing c_layout.rs into OUT_DIR");
}

fn find_library() -> Found {
    if let Some(dir) = env::var_os("NEXAR_LIB_DIR") {
        let dir = PathBuf::from(dir);
        let include_dirs = match env::var_os("NEXAR_INCLUDE_DIR") {
            Some(inc) => vec![PathBuf::from(inc)],
            None => dir
                .parent()
                .map(|p| vec![p.join("include")])
                .unwrap_or_default(),
        };
        return Found {
            lib_dirs: vec![dir],
            include_dirs,
            libs: vec!["nexar".to_string()],
        };
    }

    match pkg_config(&[]) {
        Ok(found) => found,
        Err(why) => panic!(
            "\n\nlibnexar-sys: could not find libnexar with pkg-config: {}\n\
             Install libnexar (cmake --install build --prefix PREFIX) and point \
             PKG_CONFIG_PATH at the directory holding nexar.pc \
             (PKG_CONFIG_PATH=PREFIX/lib/pkgconfig), or set NEXAR_LIB_DIR to the \
             directory holding libnexar.so. scripts/test-rust.sh does all of this.\n\n",
            why
        ),
    }
}

fn pkg_config(extra: &[&str]) -> Result<Found, String> {
    let program = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string());
    let out = Command::new(&program)
        .args(extra)
        .args(["--libs", "--cflags", "nexar"])
        .output()
        .map_err(|e| format!("running `{}`: {}", program, e))?;
    if !out.status.success() {
        return Err(format!(
            "`{} {} --libs --cflags nexar` failed ({}): {}",
            program,
            extra.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut found = Found {
        lib_dirs: Vec::new(),
        include_dirs: Vec::new(),
        libs: Vec::new(),
    };
    for word in text.split_whitespace() {
        if let Some(dir) = word.strip_prefix("-L") {
            found.lib_dirs.push(PathBuf::from(dir));
        } else if let Some(lib) = word.strip_prefix("-l") {
            found.libs.push(lib.to_string());
        } else if let Some(dir) = word.strip_prefix("-I") {
            found.include_dirs.push(PathBuf::from(dir));
        }
    }
    if !found.libs.iter().any(|l| l == "nexar") {
        found.libs.push("nexar".to_string());
    }
    Ok(found)
}

/// Builds and runs layout/probe.c; returns its output (Rust source).
fn probe_layout(found: &Found, out_dir: &Path) -> Result<String, String> {
    let host = env::var("HOST").unwrap_or_default();
    let target = env::var("TARGET").unwrap_or_default();
    if host != target {
        return Err(format!(
            "cross-compiling ({} -> {}): the probe cannot run here",
            host, target
        ));
    }
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").ok_or("no CARGO_MANIFEST_DIR")?);
    let source = manifest.join("layout").join("probe.c");
    let exe = out_dir.join("nexar_layout_probe");
    let cc = env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let mut cmd = Command::new(&cc);
    cmd.arg("-std=c99");
    for dir in &found.include_dirs {
        cmd.arg(format!("-I{}", dir.display()));
    }
    cmd.arg(&source).arg("-o").arg(&exe);
    let built = cmd
        .output()
        .map_err(|e| format!("running the C compiler `{}`: {}", cc, e))?;
    if !built.status.success() {
        return Err(format!(
            "`{:?}` failed: {}",
            cmd,
            String::from_utf8_lossy(&built.stderr).trim()
        ));
    }
    let ran = Command::new(&exe)
        .output()
        .map_err(|e| format!("running {}: {}", exe.display(), e))?;
    if !ran.status.success() {
        return Err(format!("{} failed ({})", exe.display(), ran.status));
    }
    String::from_utf8(ran.stdout).map_err(|e| format!("probe output is not UTF-8: {}", e))
}
