// Swagger UI on this service's OpenAPI document, with FastAPI's default settings. A file of
// its own rather than an inline script: the page's Content-Security-Policy runs no inline code.
"use strict";
window.ui = SwaggerUIBundle({
  url: "openapi.json",
  dom_id: "#swagger-ui",
  layout: "BaseLayout",
  deepLinking: true,
  showExtensions: true,
  showCommonExtensions: true,
  validatorUrl: null, // the badge would ask a validator elsewhere about this document
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
});
