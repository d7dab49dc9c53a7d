// The DSH persistence backend over surfacelog (`surfacelog/dsh`): a plugin class for a
// DSH host, registered where its JSONL backend goes
// (`format-spec/upstream/dsh-persistence.md` §3.6).
import type { Context } from '@deepseek-ai/cordis';
import SessionPersistence from '@deepseek-ai/dsh-session-persistence';
import type {
  SessionInspection,
  SessionLocation,
  SessionPersistenceSnapshot,
} from '@deepseek-ai/dsh-session-persistence';
import type { SessionEvent, SessionHeader, SessionId, SessionPreparation } from '@deepseek-ai/dsh-session';

/** The configuration (§3.5): any other key is refused. */
export interface SurfacelogSessionPersistenceConfig {
  /** The directory holding the sessions; resolved to absolute once. */
  root: string;
  /** Ready cold preparations kept for reuse (default 5). */
  preparedSessionCacheSize?: number;
  /** The live batching window in ms (default 200). */
  writeBatchMaxDelayMs?: number;
  /** The host's existing DSH sessions, imported once before the first storage access:
   * a JSONL root or a SQLite database file (only read). */
  importFrom?: { jsonl: string } | { sqlite: string };
}

/** What the import of `importFrom` did. */
export interface SurfacelogImportReport {
  /** The sessions imported. */
  imported: string[];
  /** The sessions the store held already. */
  present: string[];
  /** The logs DSH refuses to read: not imported; reads of their ids keep refusing. */
  refused: {
    place: string;
    id: string | null;
    version: string | null;
    code: string;
    message: string;
  }[];
}

/** The DSH persistence backend over surfacelog's verbatim store. */
export default class SurfacelogSessionPersistence extends SessionPersistence {
  static inject: string[];
  static Config: unknown;
  readonly name: string;
  readonly supportsRawArtifacts: false;
  /** The absolute root. */
  readonly root: string;
  constructor(ctx: Context, config: SurfacelogSessionPersistenceConfig);
  /** What the import of `importFrom` did, once it ran. */
  readonly imported: SurfacelogImportReport | undefined;
  locate(meta: SessionHeader): SessionLocation;
  create(meta: SessionHeader): Promise<void>;
  append(id: SessionId, events: readonly SessionEvent[]): Promise<void>;
  prepare(id: SessionId, signal?: AbortSignal): Promise<SessionPreparation>;
  load(id: SessionId): Promise<SessionInspection>;
  inspect(id: SessionId, signal?: AbortSignal): Promise<SessionInspection>;
  readFrom(
    id: SessionId,
    fromSeq: number,
    signal?: AbortSignal,
  ): Promise<{ meta: SessionHeader; events: SessionEvent[] }>;
  list(signal?: AbortSignal): Promise<SessionHeader[]>;
  listSnapshots(signal?: AbortSignal): Promise<SessionPersistenceSnapshot[]>;
}

export { SurfacelogSessionPersistence };
