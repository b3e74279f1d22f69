//! The audit in each form of its statement (`--audit-form one-pass|probe|auto`, issue 30)
//! compared with the independent model (`common::model::audit`) over the watermarks the model
//! expects: every form must give the model's report, exit code and sums.

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;

use super::{to_str, World};
use crate::common::bin::run;
use crate::common::csv;
use crate::common::model::{self, Key, Watermark};

/// The audit, its statement in `form` (`--audit-form`), compared with the model over the
/// watermarks `want_wms`: its report rows, exit code and sums.
pub(super) fn audit_equals_model(
    d: &Path,
    w: &World,
    want_wms: &BTreeMap<Key, Watermark>,
    form: &str,
    with: &dyn Fn(&[&str]) -> Vec<String>,
) -> Result<(), TestCaseError> {
    let cap = w.cap.map(|c| c.to_string());
    let mut args = with(&[
        "audit",
        "--report",
        "r.csv",
        "--no-ledger",
        "--allow-empty",
        "--quiet",
        "--format",
        "json",
        "--batch-size",
        "2",
        "--audit-form",
        form,
    ]);
    if let Some(c) = cap {
        args.extend(["--cap".to_string(), c]);
    }
    let audit = run(d, &to_str(&args));
    let want = model::audit(&w.legacy, want_wms, w.cap);
    let report = csv::try_read(&d.join("r.csv")).map_err(|e| {
        TestCaseError::fail(format!(
            "no report ({:?}): {e:#}\n{}",
            audit.code, audit.stderr
        ))
    })?;
    let mut got = report.rows;
    got.sort();
    prop_assert_eq!(&got, &want.rows, "report rows (got, want), {} form", form);
    prop_assert_eq!(
        audit.code,
        Some(if want.rows.is_empty() { 0 } else { 1 }),
        "audit exit code: {}",
        audit.stderr
    );
    let summary: serde_json::Value = serde_json::from_str(&audit.stdout)
        .map_err(|e| TestCaseError::fail(format!("audit JSON: {e}: {}", audit.stdout)))?;
    prop_assert_eq!(summary["rows_checked"].as_u64(), Some(want.rows_checked));
    prop_assert_eq!(
        summary["drifting_rows"].as_u64(),
        Some(want.rows.len() as u64)
    );
    prop_assert_eq!(
        summary["sum_abs_drift"].as_i64(),
        Some(want.sum_abs_drift),
        "sum |drift|"
    );
    prop_assert_eq!(
        summary["max_abs_drift"].as_i64(),
        Some(want.max_abs_drift),
        "largest |drift|"
    );
    for (class, n) in &want.by_class {
        prop_assert_eq!(
            summary["by_class"][class].as_u64(),
            Some(*n),
            "class {}",
            class
        );
    }
    Ok(())
}
