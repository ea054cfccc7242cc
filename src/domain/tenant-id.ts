/**
 * What a tenant id may be: `tenant create` refuses anything else, and an operator's per-tenant
 * list (an MCP secret's scope) is checked against it, so a typo is a startup error rather than a
 * scope that silently matches no one.
 */
export const TENANT_ID_RE = /^[a-z0-9][a-z0-9_-]{0,62}$/;
