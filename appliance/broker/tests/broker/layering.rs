//! Import layering inside the broker crate: the message filters sit below the broker's
//! shared state, so `filter` and its submodules never name `context`.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn filter_modules_do_not_import_the_broker_context() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![src.join("filter.rs")];
    rust_files(&src.join("filter"), &mut files);
    assert!(
        files.len() >= 3,
        "filter.rs, filter/sql92.rs and filter/tag.rs"
    );
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            assert!(
                !line.contains("crate::context"),
                "{}:{} names crate::context: {line}",
                file.display(),
                n + 1
            );
        }
    }
}
