// `sqlx::migrate!` embeds the PostgreSQL migrations at compile time but
// does not tell cargo about the directory (only on nightly): a new
// migration file must rebuild the crate (what sqlx's own
// `sqlx migrate build-script` writes).
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
