import { createRemoteJWKSet, jwtVerify, SignJWT, type JWTPayload, type JWTVerifyGetKey } from 'jose';
import type { Config } from '../../config.js';
import { deriveKey } from '../../platform/crypto/index.js';

export const BUILTIN_ISSUER = 'hangar';
const AUDIENCE = 'hangar';

/** Signs a session JWT from the built-in issuer (HS256, key derived from the master secret). */
export async function issueSessionToken(config: Config, userId: string, ttlSeconds = config.sessionTtlSeconds): Promise<string> {
  return new SignJWT({})
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setIssuer(BUILTIN_ISSUER)
    .setAudience(AUDIENCE)
    .setSubject(userId)
    .setIssuedAt()
    .setExpirationTime(Math.floor(Date.now() / 1000) + ttlSeconds)
    .sign(deriveKey(config.secretKey, 'session-jwt'));
}

export interface VerifiedSubject {
  issuer: string;
  subject: string;
  email?: string;
  /** The issuer vouches that `email` belongs to the subject (OIDC `email_verified`). */
  emailVerified?: boolean;
  name?: string;
  /** The token's expiry (ms since the epoch), from `exp`. */
  expiresAt?: number;
}

/** Verifies session tokens from the built-in issuer and, when configured, one OIDC issuer through its JWKS. */
export function createTokenVerifier(config: Config) {
  const builtinKey = deriveKey(config.secretKey, 'session-jwt');
  let jwks: JWTVerifyGetKey | undefined;

  async function oidcKeys(): Promise<JWTVerifyGetKey> {
    if (jwks) return jwks;
    let url = config.oidc!.jwksUrl;
    if (!url) {
      const discovery = `${config.oidc!.issuer.replace(/\/$/, '')}/.well-known/openid-configuration`;
      const res = await fetch(discovery, { signal: AbortSignal.timeout(5000) });
      if (!res.ok) throw new Error(`OIDC discovery at ${discovery} answered ${res.status}`);
      const doc = (await res.json()) as { jwks_uri?: string };
      if (!doc.jwks_uri) throw new Error(`OIDC discovery at ${discovery} has no jwks_uri`);
      url = doc.jwks_uri;
    }
    jwks = createRemoteJWKSet(new URL(url), { timeoutDuration: 5000, cooldownDuration: 30_000 });
    return jwks;
  }

  /** Returns the verified subject, or null when the token is not valid. */
  return async function verify(token: string): Promise<VerifiedSubject | null> {
    let issuer: string | undefined;
    try {
      const [, body] = token.split('.');
      issuer = (JSON.parse(Buffer.from(body ?? '', 'base64url').toString('utf8')) as JWTPayload).iss;
    } catch {
      return null;
    }
    try {
      if (issuer === BUILTIN_ISSUER) {
        const { payload } = await jwtVerify(token, builtinKey, { issuer: BUILTIN_ISSUER, audience: AUDIENCE, algorithms: ['HS256'] });
        return payload.sub ? { issuer: BUILTIN_ISSUER, subject: payload.sub, expiresAt: payload.exp ? payload.exp * 1000 : undefined } : null;
      }
      if (config.oidc && issuer === config.oidc.issuer) {
        const { payload } = await jwtVerify(token, await oidcKeys(), {
          issuer: config.oidc.issuer,
          audience: config.oidc.audience,
          algorithms: ['RS256', 'RS384', 'RS512', 'ES256', 'ES384', 'PS256', 'EdDSA'],
        });
        if (!payload.sub) return null;
        return {
          issuer: config.oidc.issuer,
          subject: payload.sub,
          email: typeof payload.email === 'string' ? payload.email : undefined,
          emailVerified: payload.email_verified === true,
          name: typeof payload.name === 'string' ? payload.name : undefined,
          expiresAt: payload.exp ? payload.exp * 1000 : undefined,
        };
      }
    } catch {
      return null;
    }
    return null;
  };
}
