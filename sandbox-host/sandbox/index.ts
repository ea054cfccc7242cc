export { connectDocker, type Docker, type DockerConnectOptions } from "./docker";
