//! What a route needs and who is asking: the types every door names and the
//! access check (`auth.rs`) decides. A leaf of `api`.

use super::ApiError;
use crate::tenancy::{Principal, Role};
use axum::http::StatusCode;

/// What an endpoint needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Anyone (`/health`).
    Open,
    /// List and read the tenant's tools: a consumer key of the tenant, or
    /// no key when the tenant's enumeration is public.
    Enumerate,
    /// Invoke the tenant's tools: a consumer key of the tenant.
    Invoke,
    /// Change the tenant's tools, secrets and config: a publisher key.
    Publish,
    /// Read the audit log: a publisher (its tenant's entries) or an
    /// operator (all of them).
    Audit,
    /// Tenants, quotas and keys: an operator key.
    Operate,
    /// The designer's catalog pages: a catalog session of the tenant,
    /// opened at this root with one of its keys (a consumer key is enough)
    /// that is still live. The session cookie is the credential (a bearer
    /// key is not read), and every form posted must carry the session's
    /// form token and come from this origin.
    Catalog,
    /// A catalog page that changes the tenant (a toolset's forms): the same
    /// session and form checks as [`Access::Catalog`], by a publisher key's
    /// session (an operator's too); a consumer's session is refused `403`.
    CatalogPublish,
}

impl Access {
    /// Whether the endpoint is a catalog page (a session, not a key).
    pub fn is_catalog(self) -> bool {
        matches!(self, Access::Catalog | Access::CatalogPublish)
    }

    /// The lowest role that may call the endpoint; `None` for open ones.
    pub fn least_role(self) -> Option<Role> {
        match self {
            Access::Open => None,
            Access::Enumerate | Access::Invoke | Access::Catalog => Some(Role::Consumer),
            Access::Publish | Access::Audit | Access::CatalogPublish => Some(Role::Publisher),
            Access::Operate => Some(Role::Operator),
        }
    }
}

/// Whether an endpoint is about one tenant (served under `/` for the default
/// tenant and under `/t/{tenant}/` for every tenant) or about the server
/// (served under `/` only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// One tenant's tools, secrets, config.
    Tenant,
    /// The whole server.
    Server,
}

/// The request's tenant and who is asking; what handlers act on.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The tenant of the platform root the request came through.
    pub tenant: String,
    /// Whether it came through `/t/{tenant}/` (the default tenant is also
    /// served at `/`): the URLs it is answered with stay under that root.
    pub tenant_root: bool,
    /// The key's principal; `None` only for open endpoints and public
    /// enumeration.
    pub principal: Option<Principal>,
    /// The toolset whose root the request came through (that version, or
    /// its newest): the doors serve only what it gives
    /// ([`crate::host::ToolHost::resolve_in`]). `None`: the tenant's whole
    /// catalogue.
    pub toolset: Option<std::sync::Arc<crate::store::StoredToolset>>,
}

impl Caller {
    /// The principal of an endpoint that requires a key. Handlers behind
    /// [`authorize`] with a role requirement always have one.
    pub fn principal(&self) -> Result<&Principal, ApiError> {
        self.principal.as_ref().ok_or_else(unauthorized)
    }
}

/// `401`: a valid key is required.
pub(super) fn unauthorized() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "a valid API key is required: send Authorization: Bearer <key>",
    )
}
