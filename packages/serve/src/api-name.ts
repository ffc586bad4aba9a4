/** Which of the server's listeners (HTTP APIs) a route, plugin or key belongs to. */
export type ApiName = 'inference' | 'management' | 'metrics';
