package store

import "context"

// tenantKey is the context key of the tenant a request acts for.
type tenantKey struct{}

// WithTenant returns ctx acting for tenant: every key, channel and registry
// entry a service names under ctx lives under TenantPrefix. An empty tenant
// is the shared namespace of a server without tenants.
func WithTenant(ctx context.Context, tenant string) context.Context {
	if tenant == "" {
		return ctx
	}
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// TenantOf returns the tenant ctx acts for, "" for none.
func TenantOf(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}

// TenantPrefix is the key prefix of tenant under prefix: prefix itself for
// no tenant, else "<prefix>t:<tenant>:". Tenant names have no ':' (see the
// keys file), so no tenant's prefix is another's, nor the shared one's:
// nothing in the shared namespace starts with "t:" followed by a tenant
// name and a colon, as every shared key starts with a kind such as "lock:".
func TenantPrefix(prefix, tenant string) string {
	if tenant == "" {
		return prefix
	}
	return prefix + "t:" + tenant + ":"
}

// PrefixFor is the key prefix of the tenant ctx acts for (see TenantPrefix).
func PrefixFor(ctx context.Context, prefix string) string {
	return TenantPrefix(prefix, TenantOf(ctx))
}
