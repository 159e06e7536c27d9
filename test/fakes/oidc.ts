import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWK } from 'jose';

/**
 * A fake OIDC issuer on loopback: discovery document, a JWKS endpoint and a way to mint tokens,
 * so the product's real discovery and JWKS code runs against HTTP.
 */
export class FakeOidcIssuer {
  private server!: Server;
  private privateKey!: CryptoKey;
  private jwk!: JWK;
  issuer = '';
  jwksRequests = 0;

  async start(): Promise<this> {
    const { publicKey, privateKey } = await generateKeyPair('RS256');
    this.privateKey = privateKey;
    this.jwk = { ...(await exportJWK(publicKey)), kid: 'test-key', alg: 'RS256', use: 'sig' };
    this.server = createServer((req, res) => {
      if (req.url === '/.well-known/openid-configuration') {
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ issuer: this.issuer, jwks_uri: `${this.issuer}/jwks.json` }));
      } else if (req.url === '/jwks.json') {
        this.jwksRequests++;
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ keys: [this.jwk] }));
      } else {
        res.statusCode = 404;
        res.end();
      }
    });
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.issuer = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  /** Signs a token; `key` lets a test sign with a key the issuer never published. */
  async token(
    claims: { sub: string; email?: string; emailVerified?: boolean; name?: string; aud?: string; iss?: string; expiresIn?: number },
    key: CryptoKey = this.privateKey,
  ): Promise<string> {
    const now = Math.floor(Date.now() / 1000);
    const jwt = new SignJWT({
      ...(claims.email ? { email: claims.email } : {}),
      ...(claims.emailVerified !== undefined ? { email_verified: claims.emailVerified } : {}),
      ...(claims.name ? { name: claims.name } : {}),
    })
      .setProtectedHeader({ alg: 'RS256', kid: 'test-key' })
      .setIssuer(claims.iss ?? this.issuer)
      .setAudience(claims.aud ?? 'hangar-test')
      .setSubject(claims.sub)
      .setIssuedAt(now - 5)
      .setExpirationTime(now + (claims.expiresIn ?? 3600));
    return jwt.sign(key);
  }

  async stop(): Promise<void> {
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
