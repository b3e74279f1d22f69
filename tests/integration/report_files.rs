//! The files an audit writes (issue 25): a replaced report or metrics file keeps the old
//! file's mode, owner and group (where the process may set them), a new report is created
//! 0600 or with `--report-mode` (row 12); a text key that a spreadsheet would read as a
//! formula is written exactly by default and escaped with `--spreadsheet-safe` (row 13).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::common::{csv, on_every_backend, Backend};
use crate::json_output::Fixture;

on_every_backend!(
    a_replaced_report_keeps_its_mode,
    formulas_are_escaped_on_request
);

/// The permission bits of `path`.
fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// (uid, gid) of `path`.
fn owner(path: &Path) -> (u32, u32) {
    let m = std::fs::metadata(path).unwrap();
    (m.uid(), m.gid())
}

/// A file `path` with `mode` and, when the process may set it (root), owner 4242 and group
/// 4243 (ids no account needs to have); returns the (uid, gid) the file then has.
fn existing(path: &Path, mode: u32) -> (u32, u32) {
    std::fs::write(path, "old content\n").unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    let _ = std::os::unix::fs::chown(path, Some(4242), Some(4243));
    owner(path)
}

async fn a_replaced_report_keeps_its_mode(backend: Backend) {
    let Some(fx) = Fixture::create(backend, "report_mode", &[]).await else {
        return;
    };
    fx.run(&["expand"], &[]).expect_code(0);
    fx.run(&["backfill"], &["-q"]).expect_code(0);
    let d = fx.dir.path();

    // A replaced report and metrics file keep the old file's mode, owner and group.
    let was = existing(&d.join("old.csv"), 0o640);
    let was_prom = existing(&d.join("old.prom"), 0o604);
    fx.run(
        &["audit"],
        &["-q", "--report", "old.csv", "--metrics-file", "old.prom"],
    )
    .expect_code(1);
    let report = std::fs::read_to_string(d.join("old.csv")).unwrap();
    assert!(report.starts_with("conversation_id,"), "{report}");
    assert_eq!(
        (mode(&d.join("old.csv")), owner(&d.join("old.csv"))),
        (0o640, was),
        "the replaced report's mode and (uid, gid)"
    );
    assert_eq!(
        (mode(&d.join("old.prom")), owner(&d.join("old.prom"))),
        (0o604, was_prom),
        "the replaced metrics file's mode and (uid, gid)"
    );

    // A new report: 0600, whatever the umask.
    fx.run(&["audit"], &["-q", "--report", "new.csv"])
        .expect_code(1);
    assert_eq!(mode(&d.join("new.csv")), 0o600, "a new report's mode");

    // --report-mode gives a new report its mode, and a replaced one too.
    fx.run(
        &["audit"],
        &["-q", "--report", "shared.csv", "--report-mode", "0640"],
    )
    .expect_code(1);
    assert_eq!(mode(&d.join("shared.csv")), 0o640);
    fx.run(
        &["audit"],
        &["-q", "--report", "old.csv", "--report-mode", "600"],
    )
    .expect_code(1);
    assert_eq!(mode(&d.join("old.csv")), 0o600);
    let bad = fx.run(&["audit"], &["-q", "--report-mode", "0789"]);
    bad.expect_code(2);
    assert!(bad.stderr.contains("--report-mode"), "{}", bad.stderr);
    fx.db.cleanup().await;
}

/// Text keys a spreadsheet would run as a formula (OWASP, "CSV Injection"), and one it would not.
const KEYS: [&str; 7] = [
    "=cmd|' /C calc'!A0",
    "+1+1",
    "-2+3",
    "@SUM(1+1)",
    "\tx",
    "\rx",
    "plain",
];

async fn formulas_are_escaped_on_request(backend: Backend) {
    // Conversation 7000: three messages; each key's receipt says none is read while its
    // counter is 0 (class `cleared`, drift -3: a negative number stays a number).
    let mut extra = vec![
        "INSERT INTO messages (conv_id, id, sender_id, is_deleted, is_system, created_at, unread_count) VALUES (7000, 1, 's', 0, 0, NULL, NULL), (7000, 2, 's', 0, 0, NULL, NULL), (7000, 3, 's', 0, 0, NULL, NULL)".to_string(),
    ];
    for key in KEYS {
        let k = crate::scenario::quote_literal(key);
        extra.push(format!(
            "INSERT INTO members (conv_id, user_id, active, join_position) VALUES (7000, {k}, 1, NULL)"
        ));
        extra.push(format!(
            "INSERT INTO unread_counters (conv_id, user_id, unread_count) VALUES (7000, {k}, 0)"
        ));
        extra.push(format!(
            "INSERT INTO read_receipts (conv_id, user_id, message_id) VALUES (7000, {k}, 0)"
        ));
    }
    let Some(fx) = Fixture::create(backend, "report_formulas", &extra).await else {
        return;
    };
    fx.run(&["expand"], &[]).expect_code(0);
    fx.run(&["backfill"], &["-q"]).expect_code(0);
    let d = fx.dir.path();
    fx.run(&["audit"], &["-q", "--report", "exact.csv"])
        .expect_code(1);
    fx.run(
        &["audit"],
        &["-q", "--report", "safe.csv", "--spreadsheet-safe"],
    )
    .expect_code(1);

    for (file, safe) in [("exact.csv", false), ("safe.csv", true)] {
        let report = csv::read(&d.join(file));
        let col = |name: &str| report.columns.iter().position(|c| c == name).unwrap();
        let (c, u, drift, class) = (
            col("conversation_id"),
            col("user_id"),
            col("drift"),
            col("class"),
        );
        let rows: Vec<&Vec<String>> = report.rows.iter().filter(|r| r[c] == "7000").collect();
        let mut users: Vec<String> = rows.iter().map(|r| r[u].clone()).collect();
        users.sort();
        let mut want: Vec<String> = KEYS
            .iter()
            .map(|k| {
                let risky = k.starts_with(['=', '+', '-', '@', '\t', '\r']);
                if safe && risky {
                    format!("'{k}")
                } else {
                    k.to_string()
                }
            })
            .collect();
        want.sort();
        assert_eq!(users, want, "{file}: the user_id cells read back");
        for r in &rows {
            assert_eq!(
                (r[drift].as_str(), r[class].as_str()),
                ("-3", "cleared"),
                "{file}"
            );
        }
        // The other rows (integer conversations, ordinary users) are the same in both files.
        if safe {
            let exact = csv::read(&d.join("exact.csv"));
            let others = |f: &csv::CsvFile| -> Vec<Vec<String>> {
                f.rows.iter().filter(|r| r[c] != "7000").cloned().collect()
            };
            assert_eq!(others(&report), others(&exact));
        }
    }
    fx.db.cleanup().await;
}
