//! `inspect` on the known systems (issue 32): on each fixture of `tests/fixtures/` it names the
//! system, and its proposal is the mapping of `contrib/mappings/<system>/` byte for byte after
//! its header comment; that proposal, parsed from inspect's output, runs through backfill and
//! audit to the fixture's expected values (the runner's `expected_*.csv`, worked out by hand in
//! each `expected.md`; Synapse's figures are those of `synapse::synapse`). A schema that merely
//! resembles one (a renamed table) is not recognised, and `--explain` says what is missing.

use crate::common::fixture::Fixture;
use crate::common::{bin, known_mapping, known_mapping_file, on_every_backend, Backend};
use tidemark::mapping::Mapping;

on_every_backend!(
    mattermost_recognised,
    synapse_recognised,
    dendrite_recognised,
    discourse_recognised,
    zulip_recognised,
    renamed_table_not_recognised
);

/// Runs `inspect` (with `extra` arguments) on the fixture's database; its output.
fn inspect(f: &Fixture, extra: &[&str]) -> bin::Run {
    let mut args = vec!["inspect", "--database", &f.db.url];
    args.extend_from_slice(extra);
    bin::run(f.tmp.path(), &args)
}

/// Checks that `inspect` names `system` and proposes `contrib/mappings/<folder>/tidemark.toml`
/// unedited (after a header of comment lines and one blank line), with `--explain` naming
/// the signature's tables; returns the proposal (stdout).
fn recognised(f: &Fixture, system: &str, folder: &str) -> String {
    let run = inspect(f, &[]);
    run.expect_code(0);
    let text = run.stdout.clone();
    let want_header = format!(
        "# recognised as {system}: the mapping of contrib/mappings/{folder}/, see its note"
    );
    assert!(text.contains(&want_header), "{want_header:?} in:\n{text}");
    assert!(run.stderr.contains(&format!("recognised as {system}")));
    let contrib = std::fs::read_to_string(known_mapping(folder)).unwrap();
    let (header, body) = text
        .split_once("\n\n")
        .expect("a header, then a blank line");
    assert!(
        header.lines().all(|l| l.starts_with('#')),
        "the header is comments only:\n{header}"
    );
    assert_eq!(
        body, contrib,
        "the proposal is contrib/mappings/{folder}/ as it is"
    );

    let explained = inspect(f, &["--explain"]);
    explained.expect_code(0);
    let line = format!("known system {system}: every table and key column of its signature found");
    assert!(
        explained.stdout.contains(&line),
        "{line:?} in:\n{}",
        explained.stdout
    );
    assert!(explained.stdout.ends_with(&contrib));
    text
}

/// Replaces the fixture's mapping by the proposal, as the stages would read it.
fn use_proposal(f: &mut Fixture, text: &str) {
    let mapping = Mapping::parse(text, "inspect's proposal").expect("the proposal parses");
    mapping
        .check_predicates(f.dialect.sql_parser_dialect(), f.dialect.name())
        .expect("the proposal's predicates parse");
    f.mapping = mapping;
}

/// Loads fixture `name`, checks inspect's proposal, and runs it through the runner's story
/// (the folder's expected watermarks and drift report), the application's `before` first.
async fn story(backend: Backend, name: &str, system: &str, before: &[&str]) {
    let Some(mut f) = Fixture::load(backend, name).await else {
        return;
    };
    let text = recognised(&f, system, name);
    assert!(!text.contains("# WARNING:"), "{text}");
    use_proposal(&mut f, &text);
    assert!(f.expected("expected_watermarks.csv").is_some());
    assert!(f.expected("expected_drift.csv").is_some());
    let story = f.story(before, Default::default()).await;
    assert!(
        !story.report.rows.is_empty(),
        "the fixture's drift is found"
    );
    f.finish().await;
}

async fn mattermost_recognised(backend: Backend) {
    story(backend, "mattermost", "Mattermost", &[]).await;
}

async fn dendrite_recognised(backend: Backend) {
    story(backend, "dendrite", "Dendrite", &[]).await;
}

async fn discourse_recognised(backend: Backend) {
    story(backend, "discourse", "Discourse", &[]).await;
}

async fn zulip_recognised(backend: Backend) {
    // As zulip::zulip_read_flags: the application has read hamlet's general up to 108.
    let before = "INSERT INTO read_watermarks (user_id, conversation_id, last_read_id) \
                  VALUES (2, 10, 108)";
    story(backend, "zulip", "Zulip", &[before]).await;
}

async fn synapse_recognised(backend: Backend) {
    // Synapse's own tables only: the view the mapping reads is not there yet.
    let Some(mut f) = Fixture::load_files(backend, "synapse", &["synapse"]).await else {
        return;
    };
    let views = format!("contrib/mappings/synapse/views.{}.sql", backend.name());
    let text = recognised(&f, "Matrix Synapse", "synapse");
    let warning = "# WARNING: Matrix Synapse's mapping reads tidemark_event_unread, which this \
                   database does not have yet";
    assert!(text.contains(warning), "{warning:?} in:\n{text}");
    assert!(text.contains(&views), "{views:?} in:\n{text}");
    // The DBA runs the file named; then no warning is left.
    let file = known_mapping_file("synapse", &format!("views.{}.sql", backend.name()));
    let sql = std::fs::read_to_string(&file).unwrap();
    let statements = crate::common::statements(&sql);
    let statements: Vec<&str> = statements.iter().map(String::as_str).collect();
    f.exec(&statements).await;
    let text = recognised(&f, "Matrix Synapse", "synapse");
    assert!(!text.contains("# WARNING:"), "{text}");
    use_proposal(&mut f, &text);
    // synapse::synapse's figures: 12 members, each with a position; dave, who left, keeps his
    // receipt's stream ordering 6.
    let story = f.story(&[], Default::default()).await;
    let b = &story.backfill;
    assert_eq!((b.members, b.no_evidence), (12, 0), "{b:?}");
    assert_eq!(b.by_source.get("position"), Some(&12), "{b:?}");
    let rows = f.watermark_rows().await;
    assert_eq!(rows.len(), 12, "{rows:?}");
    let dave: Vec<&String> = rows
        .iter()
        .filter(|r| r.split(',').nth(1) == Some("@dave:example.org"))
        .collect();
    assert_eq!(dave.len(), 1, "{rows:?}");
    assert_eq!(dave[0].split(',').nth(2), Some("6"), "{rows:?}");
    f.finish().await;
}

async fn renamed_table_not_recognised(backend: Backend) {
    let Some(mut f) = Fixture::load(backend, "discourse").await else {
        return;
    };
    f.exec(&["ALTER TABLE topic_users RENAME TO topic_readers"])
        .await;
    let run = inspect(&f, &["--explain"]);
    assert!(matches!(run.code, Some(0 | 1)), "{run:?}");
    assert!(!run.stdout.contains("recognised as"), "{}", run.stdout);
    assert!(!run.stderr.contains("recognised as"), "{}", run.stderr);
    let near = "known system Discourse: not recognised; found users, topics, posts; no table \
                topic_users";
    assert!(run.stdout.contains(near), "{near:?} in:\n{}", run.stdout);
    f.finish().await;
}
