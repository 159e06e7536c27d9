/**
 * Parts of the public interface that this version does not serve yet. A request under one of these
 * prefixes answers 501 `not_implemented` naming the feature, rather than a bare 404, so a client can
 * tell "not built" from "wrong URL". Remove an entry when its routes land.
 */
export const PLANNED: readonly { prefix: string; feature: string }[] = [{ prefix: '/v1/workflows', feature: 'workflow triggers' }];

export function plannedFeature(path: string): string | undefined {
  return PLANNED.find((p) => path === p.prefix || path.startsWith(`${p.prefix}/`))?.feature;
}
