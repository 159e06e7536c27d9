/**
 * Turns a template creation request (the package builder or a Dockerfile) into an ordered build plan.
 * Pure: no I/O. Templates are built on this server's own userland (Debian 12) by running each step as
 * root with `/bin/sh -ec <script>`; each script carries the environment and working directory it
 * needs, so a runner only has to run them in order.
 */
export { type BuilderInput, planFromBuilder } from './builder-plan.js';
export { type InheritedContext, planFromDockerfile } from './dockerfile-plan.js';
export { type BuildPlan, type BuildStep, DOCKERFILE_INSTRUCTIONS, SUPPORTED_OS, type SupportedOs } from './plan-common.js';
