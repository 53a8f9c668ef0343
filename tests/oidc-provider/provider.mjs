// node provider.mjs PORT REDIRECT_URI POST_LOGOUT_URI
//   env: ID_TOKEN_TTL=secs, REFRESH_TTL=secs (refresh tokens issued when set), AUTO_LOGIN=<sub> (no form),
//        FRESH_KEYS=1 (a signing key of its own, made at start: a restart rotates it),
//        NO_REFRESH_ID_TOKEN=1 (a refresh answers without an ID token, as OpenID Connect allows)
import Provider from 'oidc-provider';
import { generateKeyPairSync, randomUUID } from 'node:crypto';
const [port, redirectUri, postLogoutUri] = process.argv.slice(2);
const issuer = `http://127.0.0.1:${port}`, ttl = Number(process.env.ID_TOKEN_TTL || 3600);
const refreshTtl = Number(process.env.REFRESH_TTL || 0);
const fresh = () => ({ ...generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ format: 'jwk' }),
  kid: randomUUID(), use: 'sig', alg: 'RS256' });
const jwks = process.env.FRESH_KEYS ? { keys: [fresh()] } : undefined;
const USERS = { alice: { name: 'Alice Admin', groups: ['admins', 'users'] }, bob: { name: 'Bob User', groups: ['users'] } };
const provider = new Provider(issuer, {
  ...(jwks ? { jwks } : {}),
  clients: [{ client_id: 'gateway', client_secret: 'gateway-secret', token_endpoint_auth_method: 'client_secret_basic',
    redirect_uris: [redirectUri], post_logout_redirect_uris: [postLogoutUri],
    response_types: ['code'], grant_types: refreshTtl ? ['authorization_code', 'refresh_token'] : ['authorization_code'] }],
  issueRefreshToken: async (ctx, client) => refreshTtl > 0 && client.grantTypeAllowed('refresh_token'),
  pkce: { required: () => true },                 // PKCE (S256 only) even for the confidential client
  scopes: ['openid', 'email', 'profile', 'groups'],
  claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'], groups: ['groups'] },
  conformIdTokenClaims: false,                    // scope claims go into the ID token, not only /me
  async findAccount(ctx, sub) {                   // any login name is accepted; password ignored
    const u = USERS[sub] ?? { name: sub, groups: [] };
    return { accountId: sub, claims: async () => ({ sub, email: `${sub}@example.test`, email_verified: true, ...u }) };
  },
  async loadExistingGrant(ctx) {                  // auto-consent: no "Authorize" page after login
    const id = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (id) return ctx.oidc.provider.Grant.find(id);
    const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope('openid email profile groups');
    await grant.save();
    return grant;
  },
  ttl: { IdToken: ttl, AccessToken: ttl, Session: ttl, ...(refreshTtl ? { RefreshToken: refreshTtl } : {}) },
  features: { devInteractions: { enabled: !process.env.AUTO_LOGIN }, rpInitiatedLogout: { enabled: true } },
});
if (process.env.AUTO_LOGIN) provider.use(async (ctx, next) => {   // answer GET /interaction/:uid ourselves
  if (ctx.method !== 'GET' || !/^\/interaction\/[\w-]+$/.test(ctx.path)) return next();
  const { params } = await provider.interactionDetails(ctx.req, ctx.res);
  await provider.interactionFinished(ctx.req, ctx.res,
    { login: { accountId: params.login_hint || process.env.AUTO_LOGIN } }, { mergeWithLastSubmission: false });
});
if (process.env.NO_REFRESH_ID_TOKEN) provider.use(async (ctx, next) => {   // the provider's answer, less its ID token
  await next();
  if (ctx.method === 'POST' && ctx.path === '/token' && ctx.oidc?.params?.grant_type === 'refresh_token'
      && ctx.body && typeof ctx.body === 'object') delete ctx.body.id_token;
});
provider.listen(Number(port), '127.0.0.1', () => console.log(`READY ${issuer}`));
