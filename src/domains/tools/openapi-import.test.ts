import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { AppError } from '../../platform/http/errors.js';
import { type CatalogEntry, checkEntry, type HttpExecution } from './definition.js';
import { importOpenApi, parseOpenApiText } from './openapi-import.js';

function expectInvalid(fn: () => unknown, message: RegExp): void {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(AppError);
    expect((e as AppError).code).toBe('invalid_request');
    expect((e as AppError).message).toMatch(message);
    return;
  }
  throw new Error('expected an invalid_request error');
}

const http = (t: CatalogEntry) => t.execution as HttpExecution;
const tool = (tools: CatalogEntry[], slug: string) => {
  const t = tools.find((x) => x.slug === slug);
  if (!t) throw new Error(`no tool ${slug} among ${tools.map((x) => x.slug).join(', ')}`);
  return t;
};

const petstore = {
  openapi: '3.0.3',
  info: { title: 'Petstore', version: '1.0.0' },
  servers: [{ url: 'https://petstore.example.com/v1/' }],
  security: [{ api_key: [] }],
  paths: {
    '/pets': {
      get: {
        operationId: 'listPets',
        summary: 'List all pets',
        description: 'Pages through the pets.',
        parameters: [
          { name: 'limit', in: 'query', description: 'How many', schema: { type: 'integer', format: 'int32', maximum: 100, default: 20 } },
          { name: 'status', in: 'query', schema: { type: 'string', enum: ['available', 'sold'], nullable: true } },
          { name: 'X-Request-Id', in: 'header', schema: { type: 'string' } },
          { name: 'Accept', in: 'header', schema: { type: 'string' } },
          { name: 'session', in: 'cookie', schema: { type: 'string' } },
        ],
        responses: { '200': { description: 'A page of pets' } },
      },
      post: {
        operationId: 'createPet',
        summary: 'Create a pet',
        deprecated: true,
        requestBody: {
          required: true,
          content: {
            'application/json; charset=utf-8': {
              schema: {
                type: 'object',
                required: ['name'],
                properties: {
                  id: { type: 'integer', readOnly: true },
                  name: { type: 'string', example: 'Rex' },
                  tags: { type: 'array', items: { type: 'string' } },
                  'birth-date': { type: 'string', format: 'date' },
                },
              },
            },
          },
        },
        responses: { '201': { description: 'Created' } },
      },
    },
    '/pets/{petId}': {
      parameters: [{ name: 'petId', in: 'path', required: true, schema: { type: 'string', pattern: '^[0-9]+$' } }],
      get: { operationId: 'showPetById', responses: { '200': { description: 'The pet' } } },
      delete: { summary: 'Delete a pet', security: [], responses: { '204': { description: 'Gone' } } },
      head: { operationId: 'petExists', responses: { '200': { description: 'yes' } } },
    },
  },
  components: { securitySchemes: { api_key: { type: 'apiKey', in: 'header', name: 'X-API-Key' } } },
};

describe('importOpenApi: a 3.0 petstore', () => {
  const check = (doc: unknown) => {
    const { tools, skipped } = importOpenApi(doc, { set: 'pets' });
    expect(tools.map((t) => t.slug)).toEqual(['pets__list_pets', 'pets__create_pet', 'pets__show_pet_by_id', 'pets__delete_pets_pet_id']);
    expect(skipped).toEqual([{ name: 'petExists', reason: 'method HEAD is not supported' }]);
    for (const t of tools) expect(checkEntry(t)).toEqual([]);

    const list = tool(tools, 'pets__list_pets');
    expect(list.name).toBe('List all pets');
    expect(list.description).toBe('List all pets\n\nPages through the pets.');
    expect(list.category).toBe('custom');
    expect(list.output).toBe('A page of pets');
    expect(list.credentials).toEqual([{ name: 'apiKey', description: 'API key sent in the X-API-Key header', required: true }]);
    expect(list.inputSchema).toEqual({
      type: 'object',
      additionalProperties: false,
      properties: {
        limit: { type: 'integer', format: 'int32', maximum: 100, default: 20, description: 'How many' },
        status: { type: ['string', 'null'], enum: ['available', 'sold'] },
        X_Request_Id: { type: 'string' },
      },
    });
    expect(http(list)).toMatchObject({
      method: 'GET',
      url: 'https://petstore.example.com/v1/pets',
      query: { limit: '{{args.limit}}', status: '{{args.status}}' },
      headers: { 'X-Request-Id': '{{args.X_Request_Id}}', 'X-API-Key': '{{credentials.apiKey}}' },
      passArgs: false,
    });
    expect(http(list).body).toBeUndefined();

    const create = tool(tools, 'pets__create_pet');
    expect(create.description).toBe('Create a pet\n\nDeprecated.');
    expect(create.inputSchema).toEqual({
      type: 'object',
      additionalProperties: false,
      properties: { name: { type: 'string' }, tags: { type: 'array', items: { type: 'string' } }, birth_date: { type: 'string', format: 'date' } },
      required: ['name'],
    });
    expect(http(create)).toMatchObject({
      method: 'POST',
      body: { name: '{{args.name}}', tags: '{{args.tags}}', 'birth-date': '{{args.birth_date}}' },
      bodyType: 'json',
    });

    const show = tool(tools, 'pets__show_pet_by_id');
    expect(show.name).toBe('showPetById');
    expect(http(show).url).toBe('https://petstore.example.com/v1/pets/{{args.petId}}');
    expect(show.inputSchema).toMatchObject({ properties: { petId: { type: 'string', pattern: '^[0-9]+$' } }, required: ['petId'] });

    const del = tool(tools, 'pets__delete_pets_pet_id');
    expect(del.credentials).toEqual([]);
    expect(http(del)).toMatchObject({ method: 'DELETE', headers: {}, query: {} });
  };

  it('reads the JSON text', () => check(parseOpenApiText(JSON.stringify(petstore))));
  it('reads the YAML text', () => check(parseOpenApiText(stringify(petstore))));
  it('takes the category it is given', () => {
    expect(importOpenApi(petstore, { set: 'pets', category: 'animals' }).tools.every((t) => t.category === 'animals')).toBe(true);
  });
});

describe('importOpenApi: 3.1 and $refs', () => {
  const doc31 = {
    openapi: '3.1.0',
    info: { title: 'Shop', version: '2' },
    servers: [
      {
        url: 'https://{region}.shop.example.com:{port}/api',
        variables: { region: { default: 'eu', enum: ['eu', 'us'] }, port: { default: '8443' } },
      },
    ],
    paths: {
      '/orders/{orderId}': { $ref: '#/components/pathItems/Order' },
      '/categories': {
        post: {
          operationId: 'Create-Category',
          requestBody: { $ref: '#/components/requestBodies/Category' },
          responses: { '200': { $ref: '#/components/responses/Ok' } },
        },
      },
      '/remote': { get: { operationId: 'remote', parameters: [{ $ref: 'https://other.example.com/params.json#/limit' }] } },
    },
    components: {
      parameters: { OrderId: { name: 'orderId', in: 'path', required: true, schema: { $ref: '#/components/schemas/Id' } } },
      schemas: {
        Id: { type: 'string', description: 'An identifier', format: 'uuid' },
        Category: {
          type: 'object',
          required: ['name'],
          properties: {
            name: { type: ['string', 'null'] },
            parent: { $ref: '#/components/schemas/Category' },
            children: { type: 'array', items: { $ref: '#/components/schemas/Category' } },
          },
        },
      },
      requestBodies: { Category: { required: true, content: { 'application/json': { schema: { $ref: '#/components/schemas/Category' } } } } },
      responses: { Ok: { description: 'The saved category' } },
      pathItems: { Order: { get: { operationId: 'getOrder', summary: 'One order', parameters: [{ $ref: '#/components/parameters/OrderId' }] } } },
    },
  };

  it('resolves local refs, server variables, and cuts recursion', () => {
    const { tools, skipped } = importOpenApi(doc31, { set: 'shop' });
    expect(skipped).toEqual([{ name: 'remote', reason: 'external $ref "https://other.example.com/params.json#/limit" is not supported' }]);
    const order = tool(tools, 'shop__get_order');
    expect(http(order).url).toBe('https://eu.shop.example.com:8443/api/orders/{{args.orderId}}');
    expect(order.inputSchema).toEqual({
      type: 'object',
      additionalProperties: false,
      properties: { orderId: { type: 'string', description: 'An identifier', format: 'uuid' } },
      required: ['orderId'],
    });
    const cat = tool(tools, 'shop__create_category');
    expect(cat.output).toBe('The saved category');
    const props = cat.inputSchema.properties as Record<string, any>;
    expect(props.name).toEqual({ type: ['string', 'null'] });
    // The body is a Category; its parent and children are Category again: the recursion point is left open.
    expect(props.parent).toEqual({});
    expect(props.children).toEqual({ type: 'array', items: {} });
    expect(cat.inputSchema.required).toEqual(['name']);
    expect(checkEntry(cat)).toEqual([]);
  });

  it('skips an operation whose refs expand past the budget', () => {
    // Each level refers to the next twice: 2^16 nodes, far over the budget, from a few lines of document.
    const schemas: Record<string, unknown> = { L16: { type: 'string' } };
    for (let i = 0; i < 16; i++)
      schemas[`L${i}`] = {
        type: 'object',
        properties: { a: { $ref: `#/components/schemas/L${i + 1}` }, b: { $ref: `#/components/schemas/L${i + 1}` } },
      };
    const doc = {
      openapi: '3.1.0',
      servers: [{ url: 'https://api.example.com' }],
      paths: {
        '/big': { post: { operationId: 'big', requestBody: { content: { 'application/json': { schema: { $ref: '#/components/schemas/L0' } } } } } },
        '/small': { get: { operationId: 'small' } },
      },
      components: { schemas },
    };
    const { tools, skipped } = importOpenApi(doc, { set: 'x' });
    expect(tools.map((t) => t.slug)).toEqual(['x__small']);
    expect(skipped[0]).toMatchObject({ name: 'big', reason: expect.stringMatching(/more than 10000 nodes/) });
  });

  it('skips a ref that does not resolve', () => {
    const doc = {
      openapi: '3.0.0',
      servers: [{ url: 'https://a.example.com' }],
      paths: { '/x': { get: { operationId: 'x', parameters: [{ $ref: '#/components/parameters/Nope' }] } } },
    };
    expect(importOpenApi(doc, { set: 's' }).skipped).toEqual([{ name: 'x', reason: '$ref "#/components/parameters/Nope" does not resolve' }]);
  });
});

describe('importOpenApi: security', () => {
  const docWith = (schemes: Record<string, unknown>, security: unknown) => ({
    openapi: '3.0.1',
    servers: [{ url: 'https://api.example.com' }],
    security,
    paths: { '/me': { get: { operationId: 'me', parameters: [{ name: 'key', in: 'query', schema: { type: 'string' } }] } } },
    components: { securitySchemes: schemes },
  });

  it('puts a header API key into a credential field named after the scheme', () => {
    const [t] = importOpenApi(
      docWith({ ApiKeyAuth: { type: 'apiKey', in: 'header', name: 'X-Key', description: 'Your key' } }, [{ ApiKeyAuth: [] }]),
      {
        set: 's',
      },
    ).tools;
    expect(t!.credentials).toEqual([{ name: 'apiKeyAuth', description: 'Your key', required: true }]);
    expect(http(t!).headers).toEqual({ 'X-Key': '{{credentials.apiKeyAuth}}' });
  });

  it('puts a query API key into the query, replacing a parameter of the same name', () => {
    const [t] = importOpenApi(docWith({ query_key: { type: 'apiKey', in: 'query', name: 'key' } }, [{ query_key: [] }]), { set: 's' }).tools;
    expect(t!.credentials.map((f) => f.name)).toEqual(['queryKey']);
    expect(http(t!).query).toEqual({ key: '{{credentials.queryKey}}' });
    expect(t!.inputSchema.properties).toEqual({});
    expect(http(t!).url).toBe('https://api.example.com/me');
  });

  it('sends a bearer token', () => {
    const [t] = importOpenApi(docWith({ jwt: { type: 'http', scheme: 'Bearer', bearerFormat: 'JWT' } }, [{ jwt: [] }]), { set: 's' }).tools;
    expect(t!.credentials).toEqual([{ name: 'token', description: 'Bearer token', required: true }]);
    expect(http(t!).headers).toEqual({ Authorization: 'Bearer {{credentials.token}}' });
  });

  it('sends an OAuth 2 or OpenID Connect access token', () => {
    for (const scheme of [
      { type: 'oauth2', flows: {} },
      { type: 'openIdConnect', openIdConnectUrl: 'https://id.example.com' },
    ]) {
      const [t] = importOpenApi(docWith({ auth: scheme }, [{ auth: ['read'] }]), { set: 's' }).tools;
      expect(t!.credentials.map((f) => f.name)).toEqual(['accessToken']);
      expect(http(t!).headers).toEqual({ Authorization: 'Bearer {{credentials.accessToken}}' });
    }
  });

  it('skips an operation that only offers basic auth or a cookie key', () => {
    const { tools, skipped } = importOpenApi(
      docWith({ basic: { type: 'http', scheme: 'basic' }, cookie: { type: 'apiKey', in: 'cookie', name: 'sid' } }, [{ basic: [] }, { cookie: [] }]),
      { set: 's' },
    );
    expect(tools).toEqual([]);
    expect(skipped).toEqual([
      { name: 'me', reason: 'HTTP basic authentication ("basic") cannot be expressed; apiKey scheme "cookie" in cookie cannot be expressed' },
    ]);
  });

  it('takes the first alternative that can be expressed, including none at all', () => {
    const schemes = { basic: { type: 'http', scheme: 'basic' }, bearer: { type: 'http', scheme: 'bearer' } };
    const [t] = importOpenApi(docWith(schemes, [{ basic: [] }, { bearer: [] }]), { set: 's' }).tools;
    expect(t!.credentials.map((f) => f.name)).toEqual(['token']);
    const [open] = importOpenApi(docWith(schemes, [{ basic: [] }, {}]), { set: 's' }).tools;
    expect(open!.credentials).toEqual([]);
    expect(http(open!).headers).toEqual({});
  });

  it('combines the schemes of one requirement set', () => {
    const schemes = { app: { type: 'apiKey', in: 'query', name: 'app_id' }, 'X-API-KEY': { type: 'apiKey', in: 'header', name: 'X-API-KEY' } };
    const [t] = importOpenApi(docWith(schemes, [{ app: [], 'X-API-KEY': [] }]), { set: 's' }).tools;
    expect(t!.credentials.map((f) => f.name)).toEqual(['app', 'xApiKey']);
    expect(http(t!).query).toMatchObject({ app_id: '{{credentials.app}}' });
    expect(http(t!).headers).toEqual({ 'X-API-KEY': '{{credentials.xApiKey}}' });
  });
});

describe('importOpenApi: bodies, names and servers', () => {
  const base = { openapi: '3.0.0', servers: [{ url: 'https://api.example.com/' }] };

  it('sends a form-encoded object body as a form', () => {
    const doc = {
      ...base,
      paths: {
        '/token': {
          post: {
            operationId: 'token',
            requestBody: {
              content: {
                'application/x-www-form-urlencoded': {
                  schema: { type: 'object', required: ['grant_type'], properties: { grant_type: { type: 'string' }, scope: { type: 'string' } } },
                },
              },
            },
          },
        },
      },
    };
    const [t] = importOpenApi(doc, { set: 'auth' }).tools;
    expect(http(t!)).toMatchObject({ bodyType: 'form', body: { grant_type: '{{args.grant_type}}', scope: '{{args.scope}}' } });
    // The body itself is optional, so none of its properties is required.
    expect(t!.inputSchema.required).toBeUndefined();
  });

  it('skips bodies it cannot express, saying why', () => {
    const op = (content: unknown) => ({ post: { requestBody: { content } } });
    const doc = {
      ...base,
      paths: {
        '/upload': op({ 'multipart/form-data': { schema: { type: 'object' } }, 'application/octet-stream': {} }),
        '/list': op({ 'application/json': { schema: { type: 'array', items: { type: 'string' } } } }),
        '/free': op({ 'application/json': { schema: { type: 'object', additionalProperties: true } } }),
        '/clash/{name}': {
          post: {
            parameters: [{ name: 'name', in: 'path', required: true, schema: { type: 'string' } }],
            requestBody: { content: { 'application/json': { schema: { type: 'object', properties: { name: { type: 'string' } } } } } },
          },
        },
      },
    };
    const { tools, skipped } = importOpenApi(doc, { set: 'b' });
    expect(tools).toEqual([]);
    expect(skipped).toEqual([
      {
        name: 'POST /upload',
        reason: 'request body type multipart/form-data, application/octet-stream is not supported (only JSON and form bodies)',
      },
      { name: 'POST /list', reason: 'request body is not a JSON object' },
      { name: 'POST /free', reason: 'request body object declares no properties' },
      { name: 'POST /clash/{name}', reason: 'body property "name" and path parameter "name" both map to the argument "name"' },
    ]);
  });

  it('skips a path that does not start with a slash', () => {
    const doc = { ...base, paths: { pets: { get: { operationId: 'pets' } }, '/ok': { get: { operationId: 'ok' } } } };
    const { tools, skipped } = importOpenApi(doc, { set: 'p' });
    expect(tools.map((t) => http(t).url)).toEqual(['https://api.example.com/ok']);
    expect(skipped).toEqual([{ name: 'pets', reason: 'its path does not start with "/"' }]);
  });

  it('merges allOf object bodies', () => {
    const doc = {
      ...base,
      paths: {
        '/u': {
          put: {
            operationId: 'putUser',
            requestBody: {
              required: true,
              content: {
                'application/json': {
                  schema: {
                    allOf: [{ type: 'object', required: ['a'], properties: { a: { type: 'string' } } }, { properties: { b: { type: 'number' } } }],
                  },
                },
              },
            },
          },
        },
      },
    };
    const [t] = importOpenApi(doc, { set: 'm' }).tools;
    expect(http(t!).body).toEqual({ a: '{{args.a}}', b: '{{args.b}}' });
    expect(t!.inputSchema.required).toEqual(['a']);
  });

  it('numbers duplicate slugs and names operations without an id by method and path', () => {
    const doc = {
      ...base,
      paths: {
        '/a': { get: { operationId: 'getThing' }, post: { operationId: 'get_thing' } },
        '/b': { get: { operationId: 'getThing' } },
        '/users/{userId}/photos': { get: {} },
      },
    };
    const { tools } = importOpenApi(doc, { set: 'd' });
    expect(tools.map((t) => t.slug)).toEqual(['d__get_thing', 'd__get_thing_2', 'd__get_thing_3', 'd__get_users_user_id_photos']);
    expect(tools[3]!.name).toBe('GET /users/{userId}/photos');
  });

  it('keeps long slugs within 128 characters', () => {
    const long = 'x'.repeat(300);
    const doc = { ...base, paths: { '/a': { get: { operationId: long } }, '/b': { get: { operationId: long } } } };
    const { tools } = importOpenApi(doc, { set: 'long' });
    expect(tools.map((t) => t.slug.length)).toEqual([128, 128]);
    expect(tools[1]!.slug.endsWith('_2')).toBe(true);
  });

  it('uses the base URL it is given for a document with a relative server', () => {
    const doc = { openapi: '3.0.0', servers: [{ url: '/v2' }], paths: { '/ping': { get: { operationId: 'ping' } } } };
    expectInvalid(() => importOpenApi(doc, { set: 'r' }), /server URL "\/v2" is not an absolute URL.*base URL/);
    const [t] = importOpenApi(doc, { set: 'r', baseUrl: 'https://internal.example.com/v2/' }).tools;
    expect(http(t!).url).toBe('https://internal.example.com/v2/ping');
    expectInvalid(() => importOpenApi(doc, { set: 'r', baseUrl: 'ftp://files.example.com' }), /must be http or https/);
  });

  it('caps the number of operations', () => {
    const paths: Record<string, unknown> = {};
    for (let i = 0; i < 205; i++) paths[`/r${i}`] = { get: { operationId: `op${i}` } };
    const { tools, skipped } = importOpenApi({ ...base, paths }, { set: 'many' });
    expect(tools).toHaveLength(200);
    expect(skipped).toHaveLength(5);
    expect(skipped[0]).toEqual({ name: 'op200', reason: 'more than 200 operations' });
  });
});

describe('unusable documents', () => {
  it('refuses Swagger 2.0, other versions, and documents without operations or servers', () => {
    expectInvalid(() => importOpenApi({ swagger: '2.0', paths: {} }, { set: 's' }), /Swagger 2\.0/);
    expectInvalid(() => importOpenApi({ openapi: '4.0.0', paths: {} }, { set: 's' }), /not OpenAPI 3\.0 or 3\.1/);
    expectInvalid(() => importOpenApi('openapi: 3.0.0', { set: 's' }), /not an object/);
    expectInvalid(() => importOpenApi({ openapi: '3.0.0', servers: [{ url: 'https://a.example.com' }] }, { set: 's' }), /no operations/);
    expectInvalid(() => importOpenApi({ openapi: '3.1.0', servers: [{ url: 'https://a.example.com' }], paths: {} }, { set: 's' }), /no operations/);
    expectInvalid(() => importOpenApi({ openapi: '3.0.0', paths: { '/a': { get: {} } } }, { set: 's' }), /no server URL/);
    expectInvalid(
      () => importOpenApi({ openapi: '3.0.0', servers: [{ url: 'https://{tenant}.example.com' }], paths: { '/a': { get: {} } } }, { set: 's' }),
      /server variable "tenant" has no default/,
    );
    expectInvalid(
      () => importOpenApi({ openapi: '3.0.0', servers: [{ url: 'https://a.example.com' }], paths: { '/a': { get: {} } } }, { set: 'Bad Set' }),
      /set/,
    );
  });

  it('refuses a YAML alias bomb', () => {
    const rows = ['a: &a ["x","x","x","x","x","x","x","x","x"]'];
    for (const [prev, name] of [
      ['a', 'b'],
      ['b', 'c'],
      ['c', 'd'],
      ['d', 'e'],
      ['e', 'f'],
      ['f', 'g'],
    ])
      rows.push(`${name}: &${name} [${Array(9).fill(`*${prev}`).join(',')}]`);
    expectInvalid(() => parseOpenApiText(rows.join('\n')), /too many YAML aliases/);
  });

  it('refuses a YAML alias cycle and deep nesting', () => {
    expectInvalid(() => parseOpenApiText('openapi: 3.0.0\nx: &x\n  y: *x\n'), /nests deeper than 64/);
    expectInvalid(() => parseOpenApiText(`${'['.repeat(100)}${']'.repeat(100)}`), /nests deeper than 64/);
  });

  it('refuses oversized, empty and malformed text', () => {
    expectInvalid(() => parseOpenApiText(`openapi: 3.0.0\ndescription: "${'x'.repeat(1024 * 1024)}"\n`), /larger than 1048576 bytes/);
    expectInvalid(() => parseOpenApiText('  \n'), /empty/);
    expectInvalid(() => parseOpenApiText('openapi: 3.0.0\nopenapi: 3.1.0\n'), /not valid JSON or YAML: Map keys must be unique/);
  });

  it('keeps a __proto__ key as data', () => {
    const doc = parseOpenApiText(
      '{"openapi":"3.0.0","servers":[{"url":"https://a.example.com"}],"paths":{"/p":{"post":{"operationId":"p","requestBody":{"content":{"application/json":{"schema":{"type":"object","properties":{"__proto__":{"type":"string"}}}}}}}}}}',
    );
    const [t] = importOpenApi(doc, { set: 's' }).tools;
    expect(Object.keys(t!.inputSchema.properties as object)).toEqual(['__proto__']);
    expect(Object.getPrototypeOf(http(t!).body)).toBe(Object.prototype);
  });
});
