//! The tenant's authorization providers, for a publisher
//! (docs/authorization.md): which accounts its tools can act with, and
//! where each provider is. A view of the core's providers, never a secret;
//! they are set through the admin API or `plinth provider set`.

use super::*;

/// `GET catalog/providers`.
#[derive(Template)]
#[template(path = "pages/catalog_providers.html")]
struct ProvidersPage {
    frame: Frame,
    crumbs: Vec<(String, Option<String>)>,
    rows: Vec<ProviderRow>,
    /// Plinth's redirect URI at the tenant's providers.
    callback: String,
}

/// One provider.
struct ProviderRow {
    id: String,
    name: String,
    /// The issuer, or the explicit endpoints: (what, URL).
    at: Vec<(&'static str, String)>,
    client_id: String,
    secret_set: bool,
    updated: String,
}

#[utoipa::path(get, summary = "The tenant's authorization providers", description = "For a publisher's session: every provider the tenant configured for its tools' accounts (id, display name, issuer or endpoints, client id, whether a client secret is set — never the secret), and the redirect URI to register at them.", path = "/catalog/providers", tag = "Catalog", operation_id = "catalog_providers",
    responses(
        (status = 200, description = "The providers", content_type = "text/html", body = String),
        (status = 403, description = "A consumer's session", content_type = "text/html", body = String),
    ))]
pub(in crate::api) async fn providers(catalog: Catalog) -> Response {
    let Catalog { host, options, session, links, .. } = &catalog;
    let rows = host
        .authorization_providers(&session.tenant)
        .into_iter()
        .map(|(id, settings, secret_set, updated_at)| {
            let mut place = Vec::new();
            for (what, url) in [
                ("Issuer", &settings.issuer),
                ("Authorization endpoint", &settings.authorization_endpoint),
                ("Token endpoint", &settings.token_endpoint),
                ("Revocation endpoint", &settings.revocation_endpoint),
            ] {
                if let Some(url) = url {
                    place.push((what, url.clone()));
                }
            }
            ProviderRow {
                name: settings.display_name.clone().unwrap_or_else(|| id.clone()),
                id,
                at: place,
                client_id: settings.client_id.clone(),
                secret_set,
                updated: at(updated_at),
            }
        })
        .collect();
    let callback = format!("{}/connections/callback", super::super::links::root(options, &session.tenant));
    let page = ProvidersPage {
        frame: frame(options, links, "Authorization providers", Some(session)),
        crumbs: vec![("Catalog".into(), Some(links.home())), ("Authorization providers".into(), None)],
        rows,
        callback,
    };
    pages::page(StatusCode::OK, &page)
}
