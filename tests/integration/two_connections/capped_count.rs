//! The application's capped unread count reads at most 100 rows (the servers' plans checked).

use super::*;

on_every_backend!(servers: capped_count_stops_at_100_rows);

/// Every node of a PostgreSQL JSON plan, depth first.
fn plan_nodes(node: &Value, out: &mut Vec<Value>) {
    out.push(node.clone());
    if let Some(children) = node["Plans"].as_array() {
        for c in children {
            plan_nodes(c, out);
        }
    }
}

/// The SQL of `p` with its binds replaced by literals (for EXPLAIN / ANALYZE, which take no
/// binds on MariaDB).
fn inline(sql: &str, binds: &[String], values: &BTreeMap<&str, V>, backend: Backend) -> String {
    let lit = |name: &str| match &values[name] {
        V::Int(i) => i.to_string(),
        V::Text(t) => format!("'{t}'"),
    };
    match backend {
        Backend::Postgres => {
            let mut out = sql.to_string();
            for (i, name) in binds.iter().enumerate().rev() {
                out = out.replace(&format!("${}", i + 1), &lit(name));
            }
            out
        }
        _ => {
            let mut parts = sql.split('?');
            let mut out = parts.next().unwrap().to_string();
            for (part, name) in parts.zip(binds) {
                out.push_str(&lit(name));
                out.push_str(part);
            }
            out
        }
    }
}

/// MariaDB's `Handler_read%` counters of this session.
async fn handler_reads(conn: &mut AnyConnection) -> BTreeMap<String, i64> {
    sqlx::raw_sql("SHOW SESSION STATUS LIKE 'Handler_read%'")
        .fetch_all(&mut *conn)
        .await
        .unwrap()
        .iter()
        .map(|r| {
            let name: String = r.get(0);
            let value: String = r.get(1);
            (name, value.parse().unwrap())
        })
        .collect()
}

/// Rows read between two [`handler_reads`] (all `Handler_read_*` counters).
fn rows_read(before: &BTreeMap<String, i64>, after: &BTreeMap<String, i64>) -> i64 {
    after.iter().map(|(k, v)| v - before[k]).sum()
}

/// Seed 000 §5. Carol has 5000 unread messages; the printed `unread_count` returns 100 and
/// reads 100 message rows: on PostgreSQL the Limit node's actual rows are 100 (the same count
/// without `LIMIT 100` reads 5000); on MariaDB the messages table's `r_rows` in
/// `ANALYZE FORMAT=JSON` is 100, and the handler counters read about 100 rows, against 5000
/// without the limit.
async fn capped_count_stops_at_100_rows(backend: Backend) {
    let Some(fx) = Fx::create(backend, "two_conn_cap", &["alice", "carol"]).await else {
        return;
    };
    let app = fx.by_id.clone();
    let mut conn = fx.db.connect().await;
    for chunk in 0..5 {
        let rows: Vec<String> = (0..1000)
            .map(|i| format!("({CONV}, 'alice', {})", i + chunk))
            .collect();
        exec_all(
            &mut conn,
            &[format!(
                "INSERT INTO messages (conv_id, sender_id, created_at) VALUES {}",
                rows.join(", ")
            )],
        )
        .await;
    }
    let analyze = match backend {
        Backend::Postgres => "ANALYZE messages",
        _ => "ANALYZE TABLE messages",
    };
    exec_all(&mut conn, &[analyze.to_string()]).await;
    let fxr = &fx;
    let unread = app.unread(&mut conn, CONV, "carol").await;
    assert_eq!(unread, 100, "capped at 100 (\"99+\")");

    let p = &app.all("unread_count")[0];
    let values: BTreeMap<&str, V> = [
        ("conversation", V::Int(CONV)),
        ("user", V::Text("carol".into())),
    ]
    .into_iter()
    .collect();
    let capped = inline(&p.sql, &p.binds, &values, backend);
    assert!(capped.contains("LIMIT 100"));
    let uncapped = capped.replace("LIMIT 100", "");
    match backend {
        Backend::Postgres => {
            // The Any driver has no json type: a PostgreSQL connection reads the plan as text.
            let explain = move |sql: String| async move {
                let mut c = sqlx::PgConnection::connect(&fxr.db.url).await.unwrap();
                let row = sqlx::raw_sql(&format!("EXPLAIN (ANALYZE, FORMAT JSON) {sql}"))
                    .fetch_one(&mut c)
                    .await
                    .unwrap();
                let text: String = row.try_get_unchecked(0).unwrap();
                let plan: Value = serde_json::from_str(&text).unwrap();
                let mut nodes = Vec::new();
                plan_nodes(&plan[0]["Plan"], &mut nodes);
                nodes
            };
            let nodes = explain(capped).await;
            let limits: Vec<&Value> = nodes.iter().filter(|n| n["Node Type"] == "Limit").collect();
            assert_eq!(limits.len(), 1, "one Limit node");
            let limit_rows = limits[0]["Actual Rows"].as_i64().unwrap();
            assert_eq!(limit_rows, 100, "the Limit node stops at 100 rows");
            let scan = |nodes: &[Value]| -> i64 {
                nodes
                    .iter()
                    .filter(|n| n["Relation Name"] == "messages")
                    .map(|n| {
                        n["Actual Rows"].as_i64().unwrap() * n["Actual Loops"].as_i64().unwrap()
                    })
                    .sum()
            };
            let capped_scan = scan(&nodes);
            assert_eq!(capped_scan, 100, "the messages scan returned 100 rows");
            let full = explain(uncapped).await;
            assert!(full.iter().all(|n| n["Node Type"] != "Limit"));
            let full_scan = scan(&full);
            assert_eq!(full_scan, 5000);
            eprintln!(
                "observed: postgres capped count: unread = {unread}; EXPLAIN ANALYZE: Limit actual rows \
                 = {limit_rows}, messages scan rows = {capped_scan}; without LIMIT 100: messages scan rows = {full_scan}"
            );
        }
        _ => {
            let analyze = move |sql: String| async move {
                let mut c = fx_conn(fxr).await;
                let row = sqlx::raw_sql(&format!("ANALYZE FORMAT=JSON {sql}"))
                    .fetch_one(&mut c)
                    .await
                    .unwrap();
                let text: String = row.get(0);
                let plan: Value = serde_json::from_str(&text).unwrap();
                let mut tables = Vec::new();
                find_tables(&plan, &mut tables);
                tables
                    .into_iter()
                    .find(|t| t["table_name"] == "this")
                    .unwrap_or_else(|| panic!("no table this in {plan:#}"))
            };
            let am = analyze(capped.clone()).await;
            let r_rows = am["r_rows"].as_f64().unwrap() * am["r_loops"].as_f64().unwrap();
            assert_eq!(r_rows, 100.0, "{am:#}");
            let am_full = analyze(uncapped.clone()).await;
            let r_rows_full =
                am_full["r_rows"].as_f64().unwrap() * am_full["r_loops"].as_f64().unwrap();
            assert_eq!(r_rows_full, 5000.0, "{am_full:#}");

            // The handler counters of one session around each statement, less what SHOW STATUS
            // itself adds.
            let mut c = fx_conn(fxr).await;
            let b0 = handler_reads(&mut c).await;
            let b1 = handler_reads(&mut c).await;
            let overhead = rows_read(&b0, &b1);
            let before = handler_reads(&mut c).await;
            sqlx::raw_sql(&capped).fetch_all(&mut c).await.unwrap();
            let after = handler_reads(&mut c).await;
            let capped_reads = rows_read(&before, &after) - overhead;
            let before = handler_reads(&mut c).await;
            sqlx::raw_sql(&uncapped).fetch_all(&mut c).await.unwrap();
            let after = handler_reads(&mut c).await;
            let full_reads = rows_read(&before, &after) - overhead;
            assert!(
                capped_reads <= 300,
                "the capped count reads about 100 messages (and their member and watermark \
                 lookups): {capped_reads} handler reads"
            );
            assert!(full_reads >= 5000, "{full_reads}");
            eprintln!(
                "observed: mysql capped count: unread = {unread}; ANALYZE FORMAT=JSON messages r_rows = \
                 {r_rows} (without LIMIT 100: {r_rows_full}); Handler_read_* delta = {capped_reads} \
                 (without LIMIT 100: {full_reads})"
            );
        }
    }
    drop(conn);
    fx.db.cleanup().await;
}

/// A new connection to the fixture's database.
async fn fx_conn(fx: &Fx) -> AnyConnection {
    fx.db.connect().await
}

/// Every `table` object of a MariaDB ANALYZE FORMAT=JSON document.
fn find_tables(v: &Value, out: &mut Vec<Value>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                if k == "table" && child.is_object() {
                    out.push(child.clone());
                }
                find_tables(child, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|i| find_tables(i, out)),
        _ => {}
    }
}
