// Minimal typings for the parts of oidc-provider 8 (untyped JavaScript) that test/fakes/oauth-server.ts uses.
declare module 'oidc-provider' {
  import type { IncomingMessage, ServerResponse } from 'node:http';

  export interface KoaContext {
    path: string;
    status: number;
    body: unknown;
    type: string;
    req: IncomingMessage;
    oidc?: { route?: string; client?: { clientId: string }; params?: Record<string, unknown> };
  }

  export interface InteractionDetails {
    uid: string;
    prompt: { name: string; details: Record<string, any> };
    params: Record<string, any>;
    session?: { accountId?: string };
    grantId?: string;
  }

  export interface Grant {
    addOIDCScope(scope: string): void;
    addOIDCClaims(claims: string[]): void;
    addResourceScope(indicator: string, scope: string): void;
    save(): Promise<string>;
  }

  export default class Provider {
    constructor(issuer: string, configuration: Record<string, unknown>);
    Grant: { new (props: { accountId: string; clientId: string }): Grant; find(id: string): Promise<Grant | undefined> };
    use(fn: (ctx: KoaContext, next: () => Promise<void>) => Promise<void>): void;
    on(event: string, listener: (ctx: KoaContext, err: Error) => void): this;
    callback(): (req: IncomingMessage, res: ServerResponse) => void;
    interactionDetails(req: IncomingMessage, res: ServerResponse): Promise<InteractionDetails>;
    interactionFinished(
      req: IncomingMessage,
      res: ServerResponse,
      result: Record<string, unknown>,
      opts?: { mergeWithLastSubmission?: boolean },
    ): Promise<void>;
  }
}
