/**
 * Turns a template creation request (the package builder or a Dockerfile) into an ordered build plan.
 * Pure: no I/O. Templates are built on an OS image or this server's own userland (ADR 0022) by running each
 * step as root with `/bin/sh -ec <script>`; each script carries the environment and working directory it
 * needs, so a runner only has to run them in order.
 */
export { type BuilderInput, checkOs, planFromBuilder } from './builder-plan.js';
export { type InheritedContext, planFromDockerfile } from './dockerfile-plan.js';
export { type BuildBase, type BuildPlan, type BuildStep, DOCKERFILE_INSTRUCTIONS, KNOWN_OS } from './plan-common.js';
