//! A hook for the fault tests (`tests/integration/faults.rs`), compiled only with the
//! `test-hooks` feature (the tests turn it on; a release build has none): with
//! `TIDEMARK_TEST_PAUSE_AT=STEP` and `TIDEMARK_TEST_PAUSE_FILE=PATH` in the environment,
//! `contract --execute` writes PATH (holding STEP) when it reaches STEP and waits there until
//! PATH is removed, so that a test can `kill -9` it at a known point. The steps: `archive`
//! (after the archive's first batch committed, the rest not yet), `checksum` (the archive
//! written, not yet verified), `ddl` (the archive verified, the DDL not yet run), `dropped`
//! (the DDL committed, the ledger not yet written).

/// Waits at `step` if the environment asks for it (see the module documentation); does
/// nothing in a build without the `test-hooks` feature.
pub async fn pause_at(step: &str) {
    #[cfg(feature = "test-hooks")]
    {
        use std::path::Path;
        use std::time::Duration;
        let (Ok(at), Ok(file)) = (
            std::env::var("TIDEMARK_TEST_PAUSE_AT"),
            std::env::var("TIDEMARK_TEST_PAUSE_FILE"),
        ) else {
            return;
        };
        if at != step || std::fs::write(&file, step).is_err() {
            return;
        }
        while Path::new(&file).exists() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    #[cfg(not(feature = "test-hooks"))]
    let _ = step;
}
