import { z } from 'zod';

export const TEMPLATE_STATUSES = ['pending', 'building', 'ready', 'failed'] as const;
export const TemplateSlug = z
  .string()
  .regex(/^[a-z0-9][a-z0-9-]{0,62}$/, 'must be 1 to 63 lowercase letters, digits and "-", starting with a letter or digit');

export const CreateTemplateBody = z
  .object({
    slug: TemplateSlug,
    name: z.string().min(1).max(200),
    os: z
      .string()
      .min(1)
      .max(40)
      .optional()
      .describe(
        'ubuntu-22.04, ubuntu-24.04, debian-12 or alpine-3.19: the template is built on an image of that distribution, made from the ' +
          'mirror the operator configured with its signatures verified (a build whose mirror is unreachable fails with the reason). ' +
          'Default: ubuntu-24.04 when its image can be built here, else this server’s own userland (the template’s `os` and `osImage` say which)',
      ),
    runtimes: z
      .array(z.object({ name: z.string().min(1).max(40), version: z.string().min(1).max(40) }).strict())
      .max(20)
      .optional(),
    apt: z
      .array(z.string().min(1).max(200))
      .max(200)
      .optional()
      .describe('System packages of the distribution: Debian or Ubuntu package names (apt), or Alpine package names on alpine-3.19 (apk)'),
    npm: z.array(z.string().min(1).max(214)).max(200).optional(),
    pip: z.array(z.string().min(1).max(200)).max(200).optional(),
    env: z.record(z.string(), z.string()).optional(),
    dockerfile: z
      .string()
      .min(1)
      .max(64 * 1024)
      .optional()
      .describe('Alternative to the builder fields: FROM <template slug>, RUN, ENV, WORKDIR, ARG, LABEL'),
  })
  .strict();
export type CreateTemplateBody = z.infer<typeof CreateTemplateBody>;

export const TemplateCreated = z
  .object({ id: z.string(), slug: z.string(), name: z.string(), status: z.enum(TEMPLATE_STATUSES), createdAt: z.string() })
  .meta({ id: 'TemplateCreated' });
export type TemplateCreated = z.infer<typeof TemplateCreated>;

export const Template = z
  .object({
    id: z.string().describe('`tpl_` prefix'),
    slug: z.string(),
    name: z.string(),
    status: z.enum(TEMPLATE_STATUSES),
    progress: z.number().describe('Build progress, 0 to 100'),
    buildLog: z.string().describe('URL of the build log stream (`Accept: text/event-stream`)'),
    system: z.boolean().describe('A built-in template every organization can use'),
    os: z.string().describe('The distribution the template runs, e.g. `debian-12`'),
    osImage: z
      .boolean()
      .describe('true: built on an image of `os` made from its distribution’s mirror; false: on this server’s own userland (base-ubuntu)'),
    runs: z.string().describe('What a sandbox of this template runs, in words'),
    source: z.enum(['base', 'builder', 'dockerfile']),
    parent: z.string().nullable().describe('Slug of the template it is built on (null: the base layer)'),
    packages: z.object({ apt: z.array(z.string()), npm: z.array(z.string()), pip: z.array(z.string()) }),
    envKeys: z.array(z.string()),
    workdir: z.string().nullable(),
    error: z.string().nullable(),
    createdAt: z.string(),
    updatedAt: z.string(),
    buildStartedAt: z.string().nullable(),
    buildFinishedAt: z.string().nullable(),
  })
  .meta({ id: 'Template' });
export type Template = z.infer<typeof Template>;

export const TemplateParams = z.object({ slug: z.string().min(1).max(64) });
